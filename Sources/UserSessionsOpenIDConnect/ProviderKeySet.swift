#if OpenIDConnect
import Foundation
import JWTKit
import Synchronization
import UserSessions

/// The provider's signing keys (its JWKS), fetched when first needed, kept for a lifetime, and refetched at most
/// once per refetch interval when a token names a key it does not hold (key rotation).
///
/// The interval is short (default 5 s) and measured on the client's clock: tokens with made-up `kid`s cost the
/// provider at most one fetch per interval, and a genuine rotation is seen by the first token arriving one interval
/// after the previous refetch, however many forged ones came before.
///
/// Signatures are verified by jwt-kit; this type only chooses the key: by `kid`, of a type that fits the token's
/// algorithm, and never for an algorithm outside the allow-list.
///
/// Each key is made into jwt-kit keys once, when the key set is loaded, not once per token: a collection per
/// processor, taken in turn, since a collection is an actor and one would verify every sign-in's token one after
/// the other.
final class ProviderKeySet: Sendable {
    /// One signing key of the JWKS.
    struct Key: Sendable {
        var id: String?
        var type: String
        var algorithm: String?
        var jwk: JWK
        /// The key in jwt-kit collections, ready to verify (empty until the key set is loaded, and for a key jwt-kit
        /// cannot use).
        var verifiers: [JWTKeyCollection] = []
        /// Why jwt-kit cannot use the key (the error's type only), when it cannot.
        var unusable: String?
    }

    /// How many collections each key gets: one per processor, at most 8.
    private static let verifiersPerKey = min(max(ProcessInfo.processInfo.activeProcessorCount, 1), 8)
    /// Which collection of a key the next verification takes.
    private let nextVerifier = Atomic<Int>(0)

    private struct State {
        var keys: [Key]?
        var fetchedAt: Date?
        var lastRefetchForUnknownKey: Date?
    }

    private let state = Locked(State())
    private let lifetime: TimeInterval
    private let refetchInterval: TimeInterval

    init(lifetime: Duration, refetchInterval: Duration) {
        self.lifetime = lifetime.timeInterval
        self.refetchInterval = refetchInterval.timeInterval
    }

    /// Verifies `token`'s signature and returns its claims.
    ///
    /// - Throws: ``OpenIDConnectError/Code/malformedToken``, ``OpenIDConnectError/Code/algorithmRefused``,
    ///   ``OpenIDConnectError/Code/keyUnknown`` (transient when a refetch was not allowed yet),
    ///   ``OpenIDConnectError/Code/signatureInvalid``, or the fetch's error.
    func verify(
        _ token: String, what: String, allowedAlgorithms: Set<String>, now: Date,
        fetch: () async throws(OpenIDConnectError) -> Data
    ) async throws(OpenIDConnectError) -> (claims: OpenIDClaims, algorithm: String) {
        let header = try Self.header(of: token, what: what)
        guard let algorithm = header.algorithm else {
            throw OpenIDConnectError(.malformedToken, "\(what) has no alg")
        }
        guard allowedAlgorithms.contains(algorithm), Self.isAsymmetric(algorithm) else {
            throw OpenIDConnectError(.algorithmRefused, "\(what) is signed with \(algorithm), which is refused")
        }
        guard
            token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false).allSatisfy({ !$0.isEmpty })
        else {
            throw OpenIDConnectError(.malformedToken, "\(what) has an empty part")
        }
        let keyID = header.keyID
        let (keys, fetchedJustNow) = try await currentKeys(now: now, fetch: fetch)
        var candidates = keys.filter { Self.fits($0, keyID: keyID, algorithm: algorithm) }
        // A key set fetched for this very token is not fetched again at once.
        var refetchRefused = false
        if candidates.isEmpty, !fetchedJustNow {
            if refetchAllowed(now: now) {
                candidates = try await load(now: now, fetch: fetch).filter {
                    Self.fits($0, keyID: keyID, algorithm: algorithm)
                }
            } else {
                refetchRefused = true
            }
        }
        guard !candidates.isEmpty else {
            throw OpenIDConnectError(
                .keyUnknown,
                "no key of the provider's JWKS fits \(what) (kid \(keyID ?? "none"), \(algorithm))"
                    + (refetchRefused ? "; the JWKS was refetched less than the refetch interval ago" : ""),
                failureClass: refetchRefused ? .transient : nil)
        }
        // With a kid there is one candidate; without one, every key that fits the algorithm is tried (OpenID
        // Connect Core §10.1), so the order of the key set never decides whether a valid token is accepted.
        var lastFailure = OpenIDConnectError(.signatureInvalid, "the signature of \(what) does not verify")
        for key in candidates {
            guard !key.verifiers.isEmpty else {
                lastFailure = OpenIDConnectError(
                    .signatureInvalid, "\(what) could not be verified (\(key.unusable ?? "the key is unusable"))")
                continue
            }
            let turn = nextVerifier.wrappingAdd(1, ordering: .relaxed).oldValue
            let collection = key.verifiers[(turn & Int.max) % key.verifiers.count]
            do {
                let payload = try await collection.verify(token, as: ClaimsPayload.self)
                return (OpenIDClaims(payload.values), algorithm)
            } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
                continue
            } catch {
                lastFailure = OpenIDConnectError(
                    .signatureInvalid, "\(what) could not be verified (\(type(of: error)))")
            }
        }
        throw lastFailure
    }

    /// The `alg` and `kid` of `token`'s JOSE header (`nil` when absent or not strings), refusing anything but three
    /// base64url parts (a JWE is malformed) and a header that is not one JSON object (a repeated member too). Read
    /// with the package's small reader: the header is a few members, and `JSONSerialization` cost a sixth of a
    /// validation.
    static func header(of token: String, what: String) throws(OpenIDConnectError) -> (
        algorithm: String?, keyID: String?
    ) {
        let parts = token.utf8.split(separator: UInt8(ascii: "."), maxSplits: 3, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, let bytes = CanonicalBase64.decodeURL(parts[0]) else {
            throw OpenIDConnectError(.malformedToken, "\(what) is not a signed JWT")
        }
        do {
            return try JSONReader.read(bytes) { reader in
                var header: (algorithm: String?, keyID: String?) = (nil, nil)
                try reader.readObject(knownNames: ["alg", "kid"]) { member, reader in
                    switch member {
                    case 0: header.algorithm = try reader.readStringIfString()
                    case 1: header.keyID = try reader.readStringIfString()
                    default: try reader.skipValue()
                    }
                }
                return header
            }
        } catch {
            throw OpenIDConnectError(.malformedToken, "the header of \(what) is not a JSON object")
        }
    }

    /// Whether `algorithm` is an asymmetric JWS algorithm: `none` and HMAC never are.
    static func isAsymmetric(_ algorithm: String) -> Bool {
        ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"].contains(algorithm)
    }

    private static func fits(_ key: Key, keyID: String?, algorithm: String) -> Bool {
        if let keyID, key.id != keyID { return false }
        if let keyAlgorithm = key.algorithm, keyAlgorithm != algorithm { return false }
        switch algorithm.prefix(2) {
        case "RS", "PS": return key.type == "RSA"
        case "ES": return key.type == "EC"
        default: return algorithm == "EdDSA" && key.type == "OKP"
        }
    }

    /// The cached keys, or keys fetched now when the cache is empty or too old (then `fetchedJustNow` is true).
    private func currentKeys(now: Date, fetch: () async throws(OpenIDConnectError) -> Data)
        async throws(OpenIDConnectError) -> (keys: [Key], fetchedJustNow: Bool)
    {
        let cached = state.withLock { state -> [Key]? in
            guard let keys = state.keys, let fetchedAt = state.fetchedAt,
                now.timeIntervalSince(fetchedAt) < lifetime
            else { return nil }
            return keys
        }
        if let cached { return (cached, false) }
        return (try await load(now: now, fetch: fetch), true)
    }

    /// Claims the one refetch allowed per interval for an unknown key; `false` when it was used recently.
    private func refetchAllowed(now: Date) -> Bool {
        let refetchInterval = refetchInterval
        return state.withLock { state in
            if let last = state.lastRefetchForUnknownKey, now.timeIntervalSince(last) < refetchInterval {
                return false
            }
            state.lastRefetchForUnknownKey = now
            return true
        }
    }

    private func load(now: Date, fetch: () async throws(OpenIDConnectError) -> Data)
        async throws(OpenIDConnectError) -> [Key]
    {
        let keys = await Self.prepared(try Self.parse(try await fetch()))
        state.withLock { state in
            state.keys = keys
            state.fetchedAt = now
        }
        return keys
    }

    /// `keys`, each added to its jwt-kit collections.
    private static func prepared(_ keys: [Key]) async -> [Key] {
        var prepared: [Key] = []
        for var key in keys {
            do {
                for _ in 0..<verifiersPerKey {
                    let collection = JWTKeyCollection(
                        defaultJWTParser: DefaultJWTParser(jsonDecoder: ClaimsJSONDecoder()))
                    try await collection.add(jwk: key.jwk, isDefault: true)
                    key.verifiers.append(collection)
                }
            } catch {
                key.verifiers = []
                key.unusable = "\(type(of: error))"
            }
            prepared.append(key)
        }
        return prepared
    }

    /// The signing keys of a JWKS document; keys for encryption, of unknown types or unreadable are left out.
    static func parse(_ body: Data) throws(OpenIDConnectError) -> [Key] {
        let document = try JSONObject.parse(body, what: "the JWKS", code: .keySetFetchFailed)
        guard let entries = document["keys"] as? [[String: Any]] else {
            throw OpenIDConnectError(.keySetFetchFailed, "the JWKS has no keys array")
        }
        var keys: [Key] = []
        for (index, entry) in entries.enumerated() {
            if let use = entry["use"] as? String, use != "sig" { continue }
            guard let type = entry["kty"] as? String, ["RSA", "EC", "OKP"].contains(type),
                let data = try? JSONSerialization.data(withJSONObject: entry),
                var jwk = try? JSONDecoder().decode(JWK.self, from: data)
            else { continue }
            let id = entry["kid"] as? String
            // jwt-kit files keys by kid; a key without one gets a name no token can carry.
            if id == nil { jwk.keyIdentifier = JWKIdentifier(string: "\u{0}unnamed-\(index)") }
            keys.append(Key(id: id, type: type, algorithm: entry["alg"] as? String, jwk: jwk))
        }
        return keys
    }
}

/// Decodes unpadded base64url (RFC 4648 §5), as JWS uses it, in its one canonical spelling (``CanonicalBase64``).
func base64URLDecode(_ text: some StringProtocol) -> Data? {
    CanonicalBase64.decodeURL(text.utf8)
}

/// Encodes bytes as unpadded base64url (package-wide: the benchmark spells its JWKs with it).
package func base64URLEncode(_ bytes: some Sequence<UInt8>) -> String {
    CanonicalBase64.encodeURL(bytes)
}

extension Duration {
    /// The duration in seconds.
    var timeInterval: TimeInterval {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
#endif
