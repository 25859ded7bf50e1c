#if OpenIDConnect
import Foundation
import JWTKit
import UserSessions

/// Signs `private_key_jwt` client assertions (RFC 7523 §2.2, OpenID Connect Core §9) with jwt-kit: give it to
/// `OAuth2TokenRefresher.ClientAuthentication.privateKeyJWT(id:audience:signer:)`.
///
/// ```swift
/// let signer = try PrivateKeyJWTSigner(pem: pemFromYourSecretStore, algorithm: .es256, keyID: "2026-11")
/// let authentication = OAuth2TokenRefresher.ClientAuthentication.privateKeyJWT(
///     id: "my-app", audience: .issuer("https://id.example.com"), signer: signer)
/// ```
///
/// Every assertion has `iss` and `sub` set to the client id, `aud` to the audience it is asked for, a `jti` of 256
/// random bits, `iat` now and `exp` ``lifetime`` later; its header names the key (`kid`) and the algorithm.
///
/// - Important: The private key is kept inside the signer and never appears in its description, in errors or in
///   events. Register the matching public key with the provider, under the same `kid`.
public final class PrivateKeyJWTSigner: ClientAssertionSigner, CustomStringConvertible {
    /// A signature algorithm for client assertions.
    public struct Algorithm: Sendable, Hashable, CustomStringConvertible {
        /// The JOSE name (`RS256`, `ES256`, `EdDSA`).
        public let name: String

        /// RSASSA-PKCS1-v1_5 with SHA-256, with an RSA key of at least 2048 bits.
        public static let rs256 = Algorithm(name: "RS256")
        /// ECDSA on P-256 with SHA-256.
        public static let es256 = Algorithm(name: "ES256")
        /// Ed25519.
        public static let edDSA = Algorithm(name: "EdDSA")

        /// The JOSE name.
        public var description: String { name }
    }

    /// The algorithm of the assertions.
    public let algorithm: Algorithm
    /// The `kid` in the header of every assertion.
    public let keyID: String
    /// How long an assertion is valid (`exp` − `iat`). Default 60 s.
    public let lifetime: Duration
    private let key: PrivateKey
    private let clock: SessionClock
    /// jwt-kit's signing collection, an actor: the key is added on the first signature (init is synchronous).
    private let keys = JWTKeyCollection()
    /// Whether the key was added to ``keys``. Two first signatures at once may both add it; the second addition
    /// replaces the first with the same key, so the race is harmless.
    private let keyAdded = Locked(false)

    /// The parsed private key.
    private enum PrivateKey: Sendable {
        case rsa(Insecure.RSA.PrivateKey)
        case ecdsa(ES256PrivateKey)
        case eddsa(EdDSA.PrivateKey)
    }

    /// A signer with the private key in `pem` (PKCS #8 `PRIVATE KEY`, or `RSA PRIVATE KEY` / `EC PRIVATE KEY`).
    ///
    /// - Parameters:
    ///   - pem: The private key, PEM-encoded.
    ///   - algorithm: What the key signs with: ``Algorithm/rs256`` (RSA, 2048 bits or more), ``Algorithm/es256``
    ///     (P-256) or ``Algorithm/edDSA`` (Ed25519).
    ///   - keyID: The `kid` the provider knows the public key by; not empty.
    ///   - lifetime: How long each assertion is valid, 1 s to 5 min. Default 60 s.
    ///   - clock: Where `iat` and `exp` come from. Default `SessionClock.system`.
    /// - Throws: ``OpenIDConnectError/Code/invalidConfiguration`` when the key cannot be read for `algorithm`, the
    ///   key id is empty or the lifetime is out of range. The error never contains the key.
    public init(
        pem: String, algorithm: Algorithm, keyID: String, lifetime: Duration = .seconds(60),
        clock: SessionClock = .system
    ) throws(OpenIDConnectError) {
        func refuse(_ message: String) -> OpenIDConnectError {
            OpenIDConnectError(.invalidConfiguration, message, failureClass: .misconfiguration)
        }
        guard !keyID.isEmpty else { throw refuse("the client assertion key id is empty") }
        guard lifetime >= .seconds(1) && lifetime <= .seconds(300) else {
            throw refuse("the client assertion lifetime must be within 1…300 s")
        }
        let key: PrivateKey
        do {
            switch algorithm {
            case .rs256: key = .rsa(try Insecure.RSA.PrivateKey(pem: pem))
            case .es256: key = .ecdsa(try ES256PrivateKey(pem: pem))
            case .edDSA: key = .eddsa(try EdDSA.PrivateKey(pem: pem))
            default: throw refuse("\(algorithm) is not a client assertion algorithm")
            }
        } catch let error as OpenIDConnectError {
            throw error
        } catch {
            // jwt-kit's and swift-crypto's errors describe the input; none of it is shown.
            throw refuse("the client assertion key is not a \(algorithm) private key in PEM")
        }
        self.algorithm = algorithm
        self.keyID = keyID
        self.lifetime = lifetime
        self.key = key
        self.clock = clock
    }

    /// Signs a new assertion for `clientID`, addressed to `audience`.
    public func makeClientAssertion(clientID: String, audience: String) async throws -> String {
        let now = Int(clock.now().timeIntervalSince1970.rounded(.down))
        let claims = ClientAssertionClaims(
            iss: clientID, sub: clientID, aud: audience, jti: SignInSecrets.random(), iat: now,
            exp: now + Int(lifetime.timeInterval.rounded(.up)))
        var header = JWTHeader()
        header.typ = "JWT"
        let kid = JWKIdentifier(string: keyID)
        if !keyAdded.withLock({ $0 }) {
            switch key {
            case .rsa(let key): await keys.add(rsa: key, digestAlgorithm: .sha256, kid: kid)
            case .ecdsa(let key): await keys.add(ecdsa: key, kid: kid)
            case .eddsa(let key): await keys.add(eddsa: key, kid: kid)
            }
            keyAdded.withLock { $0 = true }
        }
        return try await keys.sign(claims, kid: kid, header: header)
    }

    /// The algorithm and the key id; never the key.
    public var description: String { "PrivateKeyJWTSigner(\(algorithm), kid: \(keyID))" }
}

/// The claims of a client assertion (RFC 7523 §3).
struct ClientAssertionClaims: JWTPayload {
    var iss: String
    var sub: String
    var aud: String
    var jti: String
    var iat: Int
    var exp: Int

    /// Nothing to verify: the package only signs these.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
#endif
