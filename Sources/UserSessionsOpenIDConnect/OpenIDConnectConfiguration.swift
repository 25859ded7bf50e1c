#if OpenIDConnect
import Foundation
import UserSessions

/// How an ``OpenIDConnectClient`` signs users in: the client's registration and the limits of every check.
public struct OpenIDConnectConfiguration: Sendable {
    /// How the client authenticates at the token endpoint (basic, post, `private_key_jwt`, or a public client), as
    /// for refreshes.
    public var clientAuthentication: OAuth2TokenRefresher.ClientAuthentication
    /// The `redirect_uri` registered with the provider; the callback arrives there.
    public var redirectURI: URL
    /// The scopes requested; `openid` is always added.
    public var scopes: [String]
    /// The ID token algorithms accepted. Default RS256, ES256 and EdDSA. `none` and the HMAC algorithms cannot be
    /// allowed: ``validate()`` refuses them.
    public var allowedAlgorithms: Set<String>
    /// How far the provider's clock may be from ours when `exp` and `iat` are checked. Default 60 s, at most 5 min.
    public var clockSkew: Duration
    /// How long a pending sign-in waits for its callback. Default 10 min.
    public var pendingSignInLifetime: Duration
    /// Where pending sign-ins are kept. Default ``PendingSignInStorage/browser``: only in the browser that started
    /// them, sealed, so the server keeps nothing an anonymous client could fill.
    public var pendingSignInStorage: PendingSignInStorage
    /// The keys that seal pending sign-ins for the browser. Default: one random key of this configuration, which
    /// only this process knows; give every instance of a fleet the same keys.
    public var pendingSignInKeys: PendingSignInKeys
    /// The most sign-ins pending at once in the state store, with ``PendingSignInStorage/stateStore`` only: when it
    /// is full, a new sign-in drops the pending sign-in that expires first. Default 10,000.
    public var maximumPendingSignIns: Int
    /// How long the discovery document is kept. Default 1 h.
    public var discoveryLifetime: Duration
    /// How long the JWKS is kept. Default 1 h.
    public var keySetLifetime: Duration
    /// The shortest time between two refetches of the JWKS for a token whose `kid` is unknown. Default 5 s: a
    /// stream of tokens with made-up `kid`s costs the provider one request per 5 s at most (12 a minute), and a
    /// genuine key rotation is accepted by the first token that arrives 5 s after the previous refetch, whatever
    /// was sent before (tokens refused in between fail with ``OpenIDConnectError/Code/keyUnknown``, transient).
    /// At most 5 min.
    public var keySetRefetchInterval: Duration
    /// How long one request to the provider may take. Default 30 s.
    public var requestTimeout: Duration
    /// Whether the callback also reads the userinfo endpoint (its `sub` must be the ID token's). Default `false`.
    public var readsUserInfo: Bool
    /// How old a back-channel logout token may be (its `iat`). Default 5 min; its `jti` is remembered that long.
    public var maximumLogoutTokenAge: Duration
    /// Whether sign-ins push their authorization request to the provider's `pushed_authorization_request_endpoint`
    /// (PAR, RFC 9126) and send the browser only `client_id` and `request_uri`. Default `false`: only when the
    /// provider's metadata says `require_pushed_authorization_requests`. When `true` and the provider has no such
    /// endpoint, starting a sign-in fails with ``OpenIDConnectError/Code/invalidConfiguration``.
    public var pushesAuthorizationRequests: Bool
    /// The DPoP proofs (RFC 9449) of sign-ins, or `nil` (the default) for bearer tokens. With them every sign-in
    /// makes a key (`DPoPProofs.algorithm`), sends its thumbprint as `dpop_jkt`, exchanges the code with
    /// a proof, refuses a token response that is not `token_type` `DPoP` (``OpenIDConnectError/Code/dpopDowngraded``)
    /// and puts the key in the session's credentials (`Credentials.dpopKey`), where every store keeps it. The
    /// refresher of ``OpenIDConnectClient/tokenRefresher(revocationEndpoint:)`` gets the same proofs.
    public var dpop: DPoPProofs?
    /// The security profile sign-ins are held to. Default ``OpenIDConnectProfile/standard``;
    /// ``OpenIDConnectProfile/fapi2`` demands the FAPI 2.0 Security Profile.
    public var profile: OpenIDConnectProfile
    /// The session identifier of a signed-in user, from the ID token's claims. Default: the `sub`.
    public var identifier: @Sendable (OpenIDClaims) -> String?
    /// What runs around a sign-in's completion (the code exchange and the callback's validation), a JWKS fetch and
    /// a back-channel logout, for tracing: with the trait `Tracing`, a `UserSessionTracing` of the product
    /// `UserSessionsTracing`. Default `nil` (none). Revocations at sign-out are measured by the registry's or the
    /// controller's own `UserSessionController.Configuration.instrumentation`.
    public var instrumentation: (any UserSessionInstrumentation)? = nil

    /// Creates a configuration with the defaults described on each property.
    public init(
        clientAuthentication: OAuth2TokenRefresher.ClientAuthentication,
        redirectURI: URL,
        scopes: [String] = ["openid", "profile", "email"],
        allowedAlgorithms: Set<String> = ["RS256", "ES256", "EdDSA"],
        clockSkew: Duration = .seconds(60),
        pendingSignInLifetime: Duration = .seconds(600),
        pendingSignInStorage: PendingSignInStorage = .browser,
        pendingSignInKeys: PendingSignInKeys = .random(),
        maximumPendingSignIns: Int = 10_000,
        discoveryLifetime: Duration = .seconds(3600),
        keySetLifetime: Duration = .seconds(3600),
        keySetRefetchInterval: Duration = .seconds(5),
        requestTimeout: Duration = .seconds(30),
        readsUserInfo: Bool = false,
        maximumLogoutTokenAge: Duration = .seconds(300),
        pushesAuthorizationRequests: Bool = false,
        dpop: DPoPProofs? = nil,
        profile: OpenIDConnectProfile = .standard,
        identifier: @escaping @Sendable (OpenIDClaims) -> String? = { $0.subject }
    ) {
        self.clientAuthentication = clientAuthentication
        self.redirectURI = redirectURI
        self.scopes = scopes
        self.allowedAlgorithms = allowedAlgorithms
        self.clockSkew = clockSkew
        self.pendingSignInLifetime = pendingSignInLifetime
        self.pendingSignInStorage = pendingSignInStorage
        self.pendingSignInKeys = pendingSignInKeys
        self.maximumPendingSignIns = maximumPendingSignIns
        self.discoveryLifetime = discoveryLifetime
        self.keySetLifetime = keySetLifetime
        self.keySetRefetchInterval = keySetRefetchInterval
        self.requestTimeout = requestTimeout
        self.readsUserInfo = readsUserInfo
        self.maximumLogoutTokenAge = maximumLogoutTokenAge
        self.pushesAuthorizationRequests = pushesAuthorizationRequests
        self.dpop = dpop
        self.profile = profile
        self.identifier = identifier
    }

    /// The client id.
    public var clientID: String { clientAuthentication.clientID }

    /// Checks that every setting can work.
    ///
    /// - Throws: ``OpenIDConnectError/Code/invalidConfiguration`` naming the setting: an allowed algorithm that is
    ///   `none`, HMAC or unknown; an empty allow-list; a clock skew that is negative or over 5 minutes; a lifetime or
    ///   timeout that is not positive; a JWKS refetch interval outside 0…300 s; fewer than 1 pending
    ///   sign-in; an empty client id; under ``OpenIDConnectProfile/fapi2``, anything weaker than the profile asks
    ///   (see there).
    public func validate() throws(OpenIDConnectError) {
        func refuse(_ message: String) -> OpenIDConnectError {
            OpenIDConnectError(.invalidConfiguration, message, failureClass: .misconfiguration)
        }
        if allowedAlgorithms.isEmpty { throw refuse("allowedAlgorithms is empty") }
        for algorithm in allowedAlgorithms.sorted() where !ProviderKeySet.isAsymmetric(algorithm) {
            throw refuse("allowedAlgorithms contains \(algorithm); only asymmetric signatures can be allowed")
        }
        if clockSkew < .zero || clockSkew > .seconds(300) { throw refuse("clockSkew must be within 0…300 s") }
        let positive: [(String, Duration)] = [
            ("pendingSignInLifetime", pendingSignInLifetime), ("discoveryLifetime", discoveryLifetime),
            ("keySetLifetime", keySetLifetime), ("requestTimeout", requestTimeout),
            ("maximumLogoutTokenAge", maximumLogoutTokenAge),
        ]
        for (name, value) in positive where value <= .zero { throw refuse("\(name) must be longer than zero") }
        if keySetRefetchInterval < .zero || keySetRefetchInterval > .seconds(300) {
            throw refuse("keySetRefetchInterval must be within 0…300 s")
        }
        if maximumPendingSignIns < 1 { throw refuse("maximumPendingSignIns must be at least 1") }
        if clientID.isEmpty { throw refuse("the client id is empty") }
        if profile == .fapi2 { try validateFAPI2(refuse) }
    }

    /// The ID token algorithms accepted: ``allowedAlgorithms``, without RS256 under ``OpenIDConnectProfile/fapi2``
    /// (FAPI 2.0 allows PS256, ES256 and EdDSA only).
    var acceptedAlgorithms: Set<String> {
        profile == .fapi2 ? allowedAlgorithms.subtracting(["RS256"]) : allowedAlgorithms
    }

    /// Whether authorization requests are pushed whatever the provider says.
    var pushesAlways: Bool { pushesAuthorizationRequests || profile == .fapi2 }

    private func validateFAPI2(_ refuse: (String) -> OpenIDConnectError) throws(OpenIDConnectError) {
        guard case .privateKeyJWT(_, let audience, let signer) = clientAuthentication else {
            throw refuse("FAPI 2.0 needs private_key_jwt client authentication")
        }
        guard case .issuer = audience else {
            throw refuse("FAPI 2.0 needs client assertions addressed to the issuer")
        }
        if let signer = signer as? PrivateKeyJWTSigner, signer.algorithm == .rs256 {
            throw refuse("FAPI 2.0 does not allow RS256 client assertions (PS256, ES256 or EdDSA)")
        }
        guard let dpop else { throw refuse("FAPI 2.0 needs DPoP (the dpop setting)") }
        if dpop.algorithm == .rs256 { throw refuse("FAPI 2.0 does not allow RS256 DPoP proofs (ES256 or EdDSA)") }
        if acceptedAlgorithms.isEmpty {
            throw refuse("FAPI 2.0 does not allow RS256 ID tokens, and allowedAlgorithms has nothing else")
        }
    }
}

/// The security profile an ``OpenIDConnectClient`` holds its sign-ins to.
public enum OpenIDConnectProfile: Sendable, Hashable, CustomStringConvertible {
    /// OpenID Connect with PKCE (S256), the RFC 9207 `iss` when the provider sends it, and whatever the configuration
    /// turns on.
    case standard
    /// The FAPI 2.0 Security Profile: the configuration must use `private_key_jwt` addressed to the issuer and
    /// DPoP, with no RS256 anywhere (``OpenIDConnectConfiguration/validate()`` refuses anything else);
    /// authorization requests are always pushed (PAR); the provider must name a pushed authorization request
    /// endpoint, accept PKCE S256, send `iss` in its authorization responses (RFC 9207) and, when it lists DPoP
    /// algorithms, list the configured one, or the sign-in fails at discovery with
    /// ``OpenIDConnectError/Code/invalidConfiguration``; a callback without `iss` is refused.
    case fapi2

    /// `standard` or `fapi2`.
    public var description: String {
        switch self {
        case .standard: "standard"
        case .fapi2: "fapi2"
        }
    }
}
#endif
