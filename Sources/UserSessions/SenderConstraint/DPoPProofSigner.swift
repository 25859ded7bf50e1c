import Foundation

/// Makes DPoP keys and signs DPoP proofs (RFC 9449) with them.
///
/// The core package has no cryptography of its own: the `OpenIDConnect` trait's module implements this protocol with
/// jwt-kit and swift-crypto (`DPoPSigner`), and you may implement it yourself, for example to keep keys in a hardware
/// module (then ``DPoPKey/privateKey`` is your handle to the key, not the key).
///
/// - Important: A proof is a compact JWS with the protected header `typ` `dpop+jwt`, `alg` the key's algorithm and
///   `jwk` the key's public half (never a private member), and the claims `jti` (never used before), `htm`, `htu`,
///   `iat`, and `ath` (the base64url SHA-256 of the access token) and `nonce` when given. Signers are compared by
///   identity, so they are classes; keep private keys out of descriptions and out of the errors you throw (their
///   type name may be shown).
public protocol DPoPProofSigner: AnyObject, Sendable {
    /// A new key of `algorithm`.
    ///
    /// - Throws: Any error, for an algorithm the signer does not support or a failure of its source of randomness.
    func makeKey(_ algorithm: DPoPKey.Algorithm) throws -> DPoPKey

    /// The RFC 7638 JWK SHA-256 thumbprint of the key's public half, base64url without padding: the `jkt` an
    /// authorization server binds tokens to, and the `dpop_jkt` of an authorization request.
    func thumbprint(of key: DPoPKey) throws -> String

    /// A new proof for one HTTP request.
    ///
    /// - Parameters:
    ///   - key: The session's key.
    ///   - method: The request's method (`htm`), for example `POST`.
    ///   - url: The request's URL without query and fragment (`htu`).
    ///   - issuedAt: The proof's `iat`.
    ///   - nonce: The server's nonce, when it gave one (`nonce`).
    ///   - accessToken: The access token the request carries, for a resource request (`ath` is its hash).
    func makeProof(
        key: DPoPKey, method: String, url: String, issuedAt: Date, nonce: String?, accessToken: String?
    ) async throws -> String
}
