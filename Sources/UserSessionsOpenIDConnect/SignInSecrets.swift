#if OpenIDConnect
import Crypto
import Foundation

/// The random values of a sign-in and the hashes computed from them.
enum SignInSecrets {
    /// 256 random bits from the system's cryptographically secure generator (`getrandom` on Linux,
    /// `SecRandomCopyBytes` on Apple platforms), as 43 base64url characters: `state`, `nonce` and the PKCE verifier.
    static func random() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return base64URLEncode(bytes)
    }

    /// The PKCE S256 challenge of `verifier` (RFC 7636 §4.2): base64url(SHA-256(ASCII(verifier))).
    static func challenge(for verifier: String) -> String {
        base64URLEncode(SHA256.hash(data: Data(verifier.utf8)))
    }

    /// The `at_hash` of `accessToken` for an ID token signed with `algorithm`: the left half of its hash with the
    /// algorithm's hash function (SHA-512 for EdDSA over Ed25519), base64url. `nil` for an algorithm without one.
    static func accessTokenHash(_ accessToken: String, algorithm: String) -> String? {
        let data = Data(accessToken.utf8)
        let digest: [UInt8]
        switch algorithm {
        case "RS256", "PS256", "ES256": digest = Array(SHA256.hash(data: data))
        case "RS384", "PS384", "ES384": digest = Array(SHA384.hash(data: data))
        case "RS512", "PS512", "ES512", "EdDSA": digest = Array(SHA512.hash(data: data))
        default: return nil
        }
        return base64URLEncode(digest.prefix(digest.count / 2))
    }

    /// Whether `a` and `b` are equal, comparing every byte whatever the first difference.
    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let (left, right) = (Array(a.utf8), Array(b.utf8))
        guard left.count == right.count else { return false }
        return zip(left, right).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}
#endif
