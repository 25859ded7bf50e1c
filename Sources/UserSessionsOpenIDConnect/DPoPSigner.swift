#if OpenIDConnect
import Crypto
import Foundation
import JWTKit
import Synchronization
import UserSessions
import _CryptoExtras

/// Makes DPoP keys with swift-crypto and signs DPoP proofs (RFC 9449) with jwt-kit: give it to `DPoPProofs`.
///
/// ```swift
/// let dpop = DPoPProofs(signer: DPoPSigner())   // ES256 keys
/// ```
///
/// Keys are stored in `DPoPKey.privateKey` as swift-crypto's raw representation for ES256 (P-256)
/// and EdDSA (Ed25519), and as PKCS #1 DER for RS256 (2048 bits). A proof's header carries `typ` `dpop+jwt`, the
/// algorithm and the public key as a JWK; its claims are a `jti` of 256 random bits, `htm`, `htu`, `iat`, `ath`
/// (base64url SHA-256 of the access token) for a resource request, and `nonce` when the server gave one.
///
/// One signer serves every session. It keeps the keys it read back last (their public JWK and jwt-kit's signing
/// key), so that a session's proofs do not derive the public key again for every request: at most
/// ``readKeysKept`` keys, forgotten all at once when full (a forgotten key is read again on its next proof).
public final class DPoPSigner: DPoPProofSigner, CustomStringConvertible {
    /// The most keys kept read back.
    public static let readKeysKept = 4096
    private let readKeys = Mutex<[DPoPKey: ReadKey]>([:])

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
        let canonical = try readKey(key).jwk.canonicalJSON
        return base64URLEncode(SHA256.hash(data: Data(canonical.utf8)))
    }

    /// A new proof signed with `key`.
    public func makeProof(
        key: DPoPKey, method: String, url: String, issuedAt: Date, nonce: String?, accessToken: String?
    ) async throws -> String {
        let read = try await signingKey(key)
        var header = JWTHeader()
        header.typ = "dpop+jwt"
        header.alg = key.algorithm.rawValue
        header.jwk = read.headerJWK
        let claims = DPoPProofClaims(
            jti: SignInSecrets.random(), htm: method, htu: url,
            iat: Int(issuedAt.timeIntervalSince1970.rounded(.down)), nonce: nonce,
            ath: accessToken.map { base64URLEncode(SHA256.hash(data: Data($0.utf8))) })
        return try await read.keys.sign(claims, header: header)
    }

    /// `key` read back: from the keys kept, or parsed (its public half derived) and kept.
    private func readKey(_ key: DPoPKey) throws -> ReadKey {
        if let kept = readKeys.withLock({ $0[key] }) { return kept }
        let jwk = try PublicJWK(of: key)
        let read = ReadKey(jwk: jwk, keys: JWTKeyCollection())
        readKeys.withLock { kept in
            if kept.count >= Self.readKeysKept { kept.removeAll(keepingCapacity: true) }
            kept[key] = read
        }
        return read
    }

    /// `key` read back, with jwt-kit's collection holding it as its default signer once the first proof added it.
    private func signingKey(_ key: DPoPKey) async throws -> ReadKey {
        let read = try readKey(key)
        if !read.added.withLock({ $0 }) {
            // Two first proofs at once may both add it; the second addition replaces the first with the same key.
            switch read.jwk.signingKey {
            case .ecdsa(let privateKey): await read.keys.add(ecdsa: privateKey)
            case .eddsa(let privateKey): await read.keys.add(eddsa: privateKey)
            case .rsa(let privateKey): await read.keys.add(rsa: privateKey, digestAlgorithm: .sha256)
            }
            read.added.withLock { $0 = true }
        }
        return read
    }

    /// The type's name.
    public var description: String { "DPoPSigner" }

    /// The key's algorithm is not one this signer makes or reads.
    struct UnsupportedAlgorithm: Error {}
    /// The stored key is not a key of its algorithm.
    struct UnreadableKey: Error {}
}

/// A key the signer read back: its public JWK, and jwt-kit's collection that signs with it.
private final class ReadKey: Sendable {
    let jwk: PublicJWK
    let keys: JWTKeyCollection
    /// The public JWK as the proof's header carries it.
    let headerJWK: [String: JWTHeaderField]
    /// Whether the key was added to ``keys``.
    let added = Mutex(false)

    init(jwk: PublicJWK, keys: JWTKeyCollection) {
        self.jwk = jwk
        self.keys = keys
        headerJWK = jwk.members.mapValues { JWTHeaderField.string($0) }
    }
}

/// A DPoP key read back: its public JWK members and jwt-kit's signing key.
private struct PublicJWK: Sendable {
    enum SigningKey: Sendable {
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
