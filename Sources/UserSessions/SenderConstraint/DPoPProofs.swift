import Foundation
import Synchronization

/// What a client needs to present DPoP proofs (RFC 9449): the signer, the algorithm of new keys, and the nonces
/// servers gave it.
///
/// Give one object to everything that sends requests for the same sessions: the ``OAuth2TokenRefresher`` (code
/// exchange, refresh, revocation, pushed authorization requests), the sign-in, and the token-forwarding proxy.
/// ``UserSessionController/authorizationHeaders(method:url:)`` uses the refresher's. Keys belong to the credentials
/// (``Credentials/dpopKey``), never to this object, so any number of sessions and processes share it.
///
/// Nonces (RFC 9449 §8 and §9) are remembered per origin (scheme, host and port): the last one a server sent with
/// `DPoP-Nonce` goes into every later proof for that origin. A request a server refused with `use_dpop_nonce` is sent
/// again once with the new nonce; a refresh sent again for a nonce is still one refresh, since the server refused
/// the first request before it rotated anything.
public final class DPoPProofs: Sendable, CustomStringConvertible {
    /// The signer of keys and proofs.
    public let signer: any DPoPProofSigner
    /// The algorithm of the keys made at sign-in. Default ES256.
    public let algorithm: DPoPKey.Algorithm
    let clock: SessionClock
    private let nonces = Mutex<[String: String]>([:])

    /// The most origins whose nonce is remembered; past it the oldest entries are forgotten (a forgotten nonce costs
    /// one more challenge).
    static let maximumOrigins = 1024

    /// Proofs from `signer`, with new keys of `algorithm`.
    ///
    /// - Parameters:
    ///   - signer: Makes keys and signs proofs; the `OpenIDConnect` trait's `DPoPSigner` uses jwt-kit.
    ///   - algorithm: The algorithm of new keys. Default ``DPoPKey/Algorithm/es256``.
    ///   - clock: Stamps each proof's `iat`. Default ``SessionClock/system``.
    public init(signer: any DPoPProofSigner, algorithm: DPoPKey.Algorithm = .es256, clock: SessionClock = .system) {
        self.signer = signer
        self.algorithm = algorithm
        self.clock = clock
    }

    /// A new key for a sign-in.
    ///
    /// - Throws: ``UserSessionError/Code/dpopProofFailed`` (misconfiguration) when the signer cannot make one.
    public func makeKey() throws(UserSessionError) -> DPoPKey {
        do {
            return try signer.makeKey(algorithm)
        } catch {
            throw Self.signerFailure(error, making: "a DPoP key")
        }
    }

    /// The thumbprint of `key` (`dpop_jkt`, and the `jkt` of bound tokens).
    ///
    /// - Throws: ``UserSessionError/Code/dpopProofFailed`` (misconfiguration) when the signer cannot read the key.
    public func thumbprint(of key: DPoPKey) throws(UserSessionError) -> String {
        do {
            return try signer.thumbprint(of: key)
        } catch {
            throw Self.signerFailure(error, making: "the DPoP key's thumbprint")
        }
    }

    /// A new proof signed with `key` for a `method` request to `url` (its query and fragment left out), with the
    /// nonce remembered for the URL's origin and, for a resource request, the hash of `accessToken`.
    ///
    /// - Throws: ``UserSessionError/Code/dpopProofFailed`` (misconfiguration) when the signer fails.
    public func proof(key: DPoPKey, method: String, url: URL, accessToken: String? = nil) async throws(UserSessionError)
        -> String
    {
        do {
            return try await signer.makeProof(
                key: key, method: method, url: Self.target(of: url), issuedAt: clock.now(),
                nonce: nonce(for: url), accessToken: accessToken)
        } catch is CancellationError {
            throw UserSessionError(.dpopProofFailed, "cancelled while making a DPoP proof", failureClass: .cancelled)
        } catch {
            throw Self.signerFailure(error, making: "a DPoP proof")
        }
    }

    /// The nonce remembered for `url`'s origin, if any.
    public func nonce(for url: URL) -> String? {
        guard let origin = Self.origin(of: url) else { return nil }
        return nonces.withLock { $0[origin] }
    }

    /// Remembers `nonce` for `url`'s origin: what a server sent in a `DPoP-Nonce` header. Call it from your own HTTP
    /// client with the header of every answer from a server you send proofs to.
    public func remember(nonce: String, for url: URL) {
        // RFC 9449 §8.1: a nonce is one or more NQCHAR (visible ASCII but the quote and the backslash); anything
        // else is not put in a proof.
        guard !nonce.isEmpty, nonce.utf8.count <= 512,
            nonce.utf8.allSatisfy({ (0x21...0x7E).contains($0) && $0 != 0x22 && $0 != 0x5C }),
            let origin = Self.origin(of: url)
        else { return }
        nonces.withLock { nonces in
            if nonces[origin] == nil, nonces.count >= Self.maximumOrigins, let any = nonces.keys.first {
                nonces[any] = nil
            }
            nonces[origin] = nonce
        }
    }

    /// Remembers the `DPoP-Nonce` of `response` from `url`, and says whether the response asks to be sent again with
    /// it: a 400 whose body is the OAuth error `use_dpop_nonce` (an authorization server), or a 401 whose
    /// `WWW-Authenticate` names the `DPoP` scheme with `error="use_dpop_nonce"` (a resource server).
    package func noteAnswer(_ response: HTTPTransportResponse, from url: URL) -> Bool {
        guard let nonce = response.headers["DPoP-Nonce"] else { return false }
        remember(nonce: nonce, for: url)
        switch response.statusCode {
        case 400:
            return OAuth2TokenResponse.parseError(response.body, secrets: [])?.code == "use_dpop_nonce"
        case 401:
            return response.headers.values(for: "WWW-Authenticate").contains { challenge in
                challenge.lowercased().hasPrefix("dpop") && challenge.contains("use_dpop_nonce")
            }
        default:
            return false
        }
    }

    /// `proofs`, or for credentials bound to a key when there are none (`holder`, such as "the refresher", has no
    /// proofs) the error: bound credentials are never sent without a proof.
    package static func required(_ proofs: DPoPProofs?, by holder: String) throws(UserSessionError) -> DPoPProofs {
        guard let proofs else {
            throw UserSessionError(
                .dpopProofFailed, "the credentials are bound to a DPoP key and \(holder) has no DPoP proofs",
                failureClass: .misconfiguration)
        }
        return proofs
    }

    /// The headers that authorize a `method` request to `url` with `token`: `Authorization: Bearer`, or for a token
    /// bound to `key` `Authorization: DPoP` and a proof from `proofs` (which `holder` must have, see
    /// ``required(_:by:)``).
    package static func authorization(
        token: String, key: DPoPKey?, proofs: DPoPProofs?, holder: String, method: String, url: URL
    ) async throws(UserSessionError) -> HTTPTransportHeaders {
        guard let key else { return [("Authorization", "Bearer " + token)] }
        let proof = try await required(proofs, by: holder).proof(key: key, method: method, url: url, accessToken: token)
        return [("Authorization", "DPoP " + token), ("DPoP", proof)]
    }

    /// The answer of `send` for a request to `url`, with every `DPoP-Nonce` remembered: a nonce challenge
    /// (``noteAnswer(_:from:)``) is sent once more, with a new proof carrying the new nonce, and never a third time.
    /// Without `proofs` it is `send` alone.
    package static func answeringNonceChallenge(
        with proofs: DPoPProofs?, from url: URL, _ send: () async throws -> HTTPTransportResponse
    ) async throws -> HTTPTransportResponse {
        let answer = try await send()
        guard let proofs, proofs.noteAnswer(answer, from: url) else { return answer }
        let again = try await send()
        _ = proofs.noteAnswer(again, from: url)
        return again
    }

    /// `htu`: the URL without query and fragment (RFC 9449 §4.2).
    static func target(of url: URL) -> String {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else {
            return url.absoluteString
        }
        components.query = nil
        components.fragment = nil
        return components.string ?? url.absoluteString
    }

    /// Scheme, host and port, lowercased: where a nonce holds.
    static func origin(of url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return nil }
        let port = url.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : 0)
        return "\(scheme)://\(host):\(port)"
    }

    private static func signerFailure(_ error: any Error, making what: String) -> UserSessionError {
        UserSessionError(
            .dpopProofFailed, "\(what) could not be made (\(type(of: error)))", failureClass: .misconfiguration)
    }

    /// The signer's type and the algorithm of new keys.
    public var description: String { "DPoPProofs(\(type(of: signer)), \(algorithm))" }
}
