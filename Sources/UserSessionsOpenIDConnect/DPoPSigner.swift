#if OpenIDConnect
import Crypto
import Foundation
import JWTKit
import UserSessions
import _CryptoExtras

/// Makes DPoP keys with swift-crypto and signs DPoP proofs (RFC 9449) with jwt-kit: give it to `DPoPProofs`.
///
/// ```swift
/// let dpop = DPoPProofs(signer: DPoPSigner())   // ES256 keys
/// ```
///
/// Keys are stored in ``UserSessions/DPoPKey/privateKey`` as swift-crypto's raw representation for ES256 (P-256)
/// and EdDSA (Ed25519), and as PKCS #1 DER for RS256 (2048 bits). A proof's header carries `typ` `dpop+jwt`, the
/// algorithm and the public key as a JWK; its claims are a `jti` of 256 random bits, `htm`, `htu`, `iat`, `ath`
/// (base64url SHA-256 of the access token) for a resource request, and `nonce` when the server gave one.
///
/// It holds no key and no state: one signer serves every session.
public final class DPoPSigner: DPoPProofSigner, CustomStringConvertible {
    /// A signer.
    public init() {}

    /// A new key of `algorithm` (ES256, EdDSA or RS256).
    public func makeKey(_ algorithm: DPoPKey.Algorithm) throws -> DPoPKey {
        switch algorithm {
        case .es256:
            return DPoPKey(algorithm: algorithm, privateKey: Array(P256.Signing.PrivateKey().rawRepresentation))
        case .edDSA:
            return DPoPKey(algorithm: algorithm, privateKey: Array(Curve25519.Signing.PrivateKey().rawRepresentation))
        case .rs256:
            let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
            return DPoPKey(algorithm: algorithm, privateKey: Array(key.derRepresentation))
        default: throw UnsupportedAlgorithm()
        }
    }

    /// The RFC 7638 thumbprint of the key's public half.
    public func thumbprint(of key: DPoPKey) throws -> String {
        let canonical = try PublicJWK(of: key).canonicalJSON
        return base64URLEncode(SHA256.hash(data: Data(canonical.utf8)))
    }

    /// A new proof signed with `key`.
    public func makeProof(
        key: DPoPKey, method: String, url: String, issuedAt: Date, nonce: String?, accessToken: String?
    ) async throws -> String {
        let jwk = try PublicJWK(of: key)
        var header = JWTHeader()
        header.typ = "dpop+jwt"
        header.alg = key.algorithm.rawValue
        header.jwk = jwk.members.mapValues { JWTHeaderField.string($0) }
        let claims = DPoPProofClaims(
            jti: SignInSecrets.random(), htm: method, htu: url,
            iat: Int(issuedAt.timeIntervalSince1970.rounded(.down)), nonce: nonce,
            ath: accessToken.map { base64URLEncode(SHA256.hash(data: Data($0.utf8))) })
        // A collection of one key, the default signer: per proof, since every session has its own key.
        let keys = JWTKeyCollection()
        switch jwk.signingKey {
        case .ecdsa(let privateKey): await keys.add(ecdsa: privateKey)
        case .eddsa(let privateKey): await keys.add(eddsa: privateKey)
        case .rsa(let privateKey): await keys.add(rsa: privateKey, digestAlgorithm: .sha256)
        }
        return try await keys.sign(claims, header: header)
    }

    /// The type's name.
    public var description: String { "DPoPSigner" }

    /// The key's algorithm is not one this signer makes or reads.
    struct UnsupportedAlgorithm: Error {}
    /// The stored key is not a key of its algorithm.
    struct UnreadableKey: Error {}
}

/// A DPoP key read back: its public JWK members and jwt-kit's signing key.
private struct PublicJWK {
    enum SigningKey {
        case ecdsa(ES256PrivateKey)
        case eddsa(EdDSA.PrivateKey)
        case rsa(JWTKit.Insecure.RSA.PrivateKey)
    }

    /// The required members of the public key (RFC 7638 §3.2), the only ones a proof's `jwk` carries.
    let members: [String: String]
    let signingKey: SigningKey

    init(of key: DPoPKey) throws {
        do {
            switch key.algorithm {
            case .es256:
                let backing = try P256.Signing.PrivateKey(rawRepresentation: key.privateKey)
                let point = Array(backing.publicKey.x963Representation)  // 0x04 ‖ x ‖ y
                members = [
                    "kty": "EC", "crv": "P-256", "x": base64URLEncode(point[1..<33]),
                    "y": base64URLEncode(point[33..<65]),
                ]
                signingKey = .ecdsa(try ES256PrivateKey(backing: backing))
            case .edDSA:
                let backing = try Curve25519.Signing.PrivateKey(rawRepresentation: key.privateKey)
                members = ["kty": "OKP", "crv": "Ed25519", "x": base64URLEncode(backing.publicKey.rawRepresentation)]
                signingKey = .eddsa(EdDSA.PrivateKey(backing: backing))
            case .rs256:
                let backing = try _RSA.Signing.PrivateKey(derRepresentation: key.privateKey)
                let primitives = try backing.publicKey.getKeyPrimitives()
                members = [
                    "kty": "RSA", "n": base64URLEncode(primitives.modulus),
                    "e": base64URLEncode(primitives.publicExponent),
                ]
                signingKey = .rsa(try JWTKit.Insecure.RSA.PrivateKey(backing: backing))
            default:
                throw DPoPSigner.UnsupportedAlgorithm()
            }
        } catch let error as DPoPSigner.UnsupportedAlgorithm {
            throw error
        } catch {
            // swift-crypto's errors may describe the input; none of it is shown.
            throw DPoPSigner.UnreadableKey()
        }
    }

    /// The members in lexicographic order, without whitespace (RFC 7638 §3.3). Every value is base64url or a fixed
    /// name, so none needs escaping.
    var canonicalJSON: String {
        "{" + members.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\"\($0.value)\"" }.joined(separator: ",") + "}"
    }
}

/// The claims of a DPoP proof (RFC 9449 §4.2).
struct DPoPProofClaims: JWTPayload {
    var jti: String
    var htm: String
    var htu: String
    var iat: Int
    var nonce: String?
    var ath: String?

    /// Nothing to verify: the package only signs these.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
#endif
