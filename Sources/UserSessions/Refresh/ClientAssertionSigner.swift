import Foundation

/// Makes the signed JWT a client authenticates with under `private_key_jwt` (RFC 7523 §2.2, OpenID Connect Core §9).
///
/// ``OAuth2TokenRefresher`` asks for a fresh assertion before every request it authenticates (a code exchange, a
/// refresh, a revocation, a client-credentials or token-exchange grant, a pushed authorization request) and sends
/// it as `client_assertion`, with `client_assertion_type` `urn:ietf:params:oauth:client-assertion-type:jwt-bearer`.
/// The core package has no cryptography of its own: the `OpenIDConnect` trait's module implements this protocol with
/// jwt-kit (`PrivateKeyJWTSigner`), and you may implement it yourself, for example to sign in a hardware module.
///
/// - Important: The assertion must carry `iss` and `sub` equal to `clientID`, `aud` equal to `audience`, a `jti`
///   never used before, a short `exp` and an `iat`. Signers are compared by identity, so they are classes; keep the
///   private key out of the signer's description, and out of the errors it throws (their type name may be shown).
public protocol ClientAssertionSigner: AnyObject, Sendable {
    /// Returns a new signed assertion (a compact JWS) for `clientID`, addressed to `audience`.
    ///
    /// Called once per request, concurrently from any task.
    ///
    /// - Throws: Any error; the request then fails as ``RefreshFailureClass/misconfiguration`` with
    ///   ``UserSessionError/Code/invalidConfiguration`` (or as cancelled for a `CancellationError`), and nothing is
    ///   sent.
    func makeClientAssertion(clientID: String, audience: String) async throws -> String
}

/// The `aud` of a `private_key_jwt` client assertion.
public enum ClientAssertionAudience: Sendable, Hashable, CustomStringConvertible {
    /// The authorization server's issuer identifier, exactly as written in its metadata: what FAPI 2.0 requires and
    /// what current providers accept. The recommended choice.
    case issuer(String)
    /// The URL of the endpoint the request goes to (the token, revocation or pushed authorization request endpoint),
    /// for older providers that expect RFC 7523's token endpoint URL.
    case endpoint

    /// The `aud` for a request to `endpoint`.
    package func value(for endpoint: URL) -> String {
        switch self {
        case .issuer(let issuer): issuer
        case .endpoint: endpoint.absoluteString
        }
    }

    /// `issuer(…)` with the issuer, or `endpoint`.
    public var description: String {
        switch self {
        case .issuer(let issuer): "issuer(\(issuer))"
        case .endpoint: "endpoint"
        }
    }
}
