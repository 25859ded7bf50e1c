#if OpenIDConnect
import Foundation
import UserSessions

/// Signs users in with OpenID Connect (authorization code with PKCE) and out again (RP-initiated and back-channel
/// logout), for a server.
///
/// 1. ``authorizationRedirect(_:replacing:)`` returns the URL to send the browser to and the pending sign-in,
///    sealed, for that browser to keep (in a cookie) until the callback.
/// 2. ``completeSignIn(callbackQuery:sealedPendingSignIn:)`` takes the callback's query and the browser's sealed
///    pending sign-in, checks them, exchanges the code, validates the ID token and returns an ``OpenIDSignIn`` whose ``OpenIDSignIn/prototype`` opens the session with
///    `registry.open(_:)` or `controller.open(_:)`.
/// 3. ``signOut(identifier:registry:postLogoutRedirectURI:state:)`` closes and clears the session and returns the
///    provider's logout URL; ``handleBackChannelLogout(logoutToken:registry:)`` signs a user out when the provider
///    asks.
///
/// Every request to the provider goes through the package's guarded HTTP layer: HTTPS (or loopback), no redirects,
/// a size limit and a deadline. Signatures are verified by jwt-kit. See <doc:SigningUsersIn> for the checks and the
/// attacks each one stops.
public final class OpenIDConnectClient: Sendable {
    private struct Discovery {
        var metadata: OpenIDProviderMetadata
        var fetchedAt: Date
    }

    /// The client's settings.
    public let configuration: OpenIDConnectConfiguration
    /// Where sign-in records and seen logout tokens are kept, and pending sign-ins with
    /// ``PendingSignInStorage/stateStore``.
    public let stateStore: any OpenIDConnectStateStore
    /// The issuer this client trusts.
    public let issuer: String
    let clock: SessionClock
    let transport: any HTTPTransport
    private let discoveryURL: URL?
    private let discovery: Locked<Discovery?>
    let keys: ProviderKeySet
    let completedSignIns = CompletedSignIns()
    private let client: GuardedHTTPClient

    /// A client for the provider at `issuer`, whose metadata is read from its discovery document
    /// (`<issuer>/.well-known/openid-configuration`) when first needed and kept for
    /// ``OpenIDConnectConfiguration/discoveryLifetime``.
    ///
    /// - Parameters:
    ///   - issuer: The issuer URL, exactly as the provider writes it in its tokens.
    ///   - configuration: The client's registration and limits.
    ///   - stateStore: Where sign-in records (for back-channel logout) and seen logout tokens are kept, and pending
    ///     sign-ins with ``PendingSignInStorage/stateStore``; share one across a fleet. Default: in this process's
    ///     memory.
    ///   - transport: The HTTP transport; default a `URLSessionHTTPTransport`.
    ///   - clock: The clock of every expiry check. Default `SessionClock/system`.
    /// - Throws: ``OpenIDConnectError/Code/invalidConfiguration`` for a configuration ``OpenIDConnectConfiguration/validate()``
    ///   refuses, an issuer that is not HTTPS (or HTTP on a loopback host), or `private_key_jwt` assertions addressed
    ///   to another issuer (`ClientAssertionAudience.issuer(_:)` must name this one exactly).
    public convenience init(
        issuer: URL, configuration: OpenIDConnectConfiguration,
        stateStore: any OpenIDConnectStateStore = InMemoryOpenIDConnectStateStore(),
        transport: (any HTTPTransport)? = nil, clock: SessionClock = .system
    ) throws(OpenIDConnectError) {
        var path = issuer.absoluteString
        if path.hasSuffix("/") { path.removeLast() }
        guard let discoveryURL = URL(string: path + "/.well-known/openid-configuration") else {
            throw OpenIDConnectError(.invalidConfiguration, "the issuer is not a URL", failureClass: .misconfiguration)
        }
        try self.init(
            issuer: issuer.absoluteString, discoveryURL: discoveryURL, metadata: nil, configuration: configuration,
            stateStore: stateStore, transport: transport, clock: clock)
    }

    /// A client for a provider described by hand (no discovery), for example a plain OAuth 2.0 server.
    ///
    /// - Throws: ``OpenIDConnectError/Code/invalidConfiguration`` as for ``init(issuer:configuration:stateStore:transport:clock:)``.
    public convenience init(
        provider: OpenIDProviderMetadata, configuration: OpenIDConnectConfiguration,
        stateStore: any OpenIDConnectStateStore = InMemoryOpenIDConnectStateStore(),
        transport: (any HTTPTransport)? = nil, clock: SessionClock = .system
    ) throws(OpenIDConnectError) {
        try self.init(
            issuer: provider.issuer, discoveryURL: nil, metadata: provider, configuration: configuration,
            stateStore: stateStore, transport: transport, clock: clock)
    }

    private init(
        issuer: String, discoveryURL: URL?, metadata: OpenIDProviderMetadata?,
        configuration: OpenIDConnectConfiguration, stateStore: any OpenIDConnectStateStore,
        transport: (any HTTPTransport)?, clock: SessionClock
    ) throws(OpenIDConnectError) {
        try configuration.validate()
        if case .privateKeyJWT(_, .issuer(let audience), _) = configuration.clientAuthentication,
            !audience.utf8.elementsEqual(issuer.utf8)
        {
            // An assertion addressed to another issuer would be refused at every request; say so now.
            throw OpenIDConnectError(
                .invalidConfiguration,
                "the client assertions are addressed to \(audience), not to the issuer \(issuer)",
                failureClass: .misconfiguration)
        }
        for url in [discoveryURL, metadata?.tokenEndpoint, metadata?.jwksURI].compactMap({ $0 }) {
            try Self.checkSecure(url, named: url.absoluteString)
        }
        let transport = transport ?? URLSessionHTTPTransport()
        self.issuer = issuer
        self.configuration = configuration
        self.stateStore = stateStore
        self.transport = transport
        self.clock = clock
        self.discoveryURL = discoveryURL
        discovery = Locked(metadata.map { Discovery(metadata: $0, fetchedAt: .distantFuture) })
        client = GuardedHTTPClient(transport: transport, endpointName: "the OpenID provider")
        keys = ProviderKeySet(
            lifetime: configuration.keySetLifetime, refetchInterval: configuration.keySetRefetchInterval)
    }

    /// Refuses `url` unless it is HTTPS, or HTTP on a loopback host (``SecureEndpoint``): the module's one check of
    /// the provider's endpoints, which names the endpoint as `name` in its
    /// ``OpenIDConnectError/Code/invalidConfiguration``.
    static func checkSecure(_ url: URL, named name: String) throws(OpenIDConnectError) {
        do {
            try SecureEndpoint.check(url, describedAs: name)
        } catch {
            throw OpenIDConnectError(
                .invalidConfiguration, "\(name) is neither HTTPS nor loopback HTTP", failureClass: .misconfiguration)
        }
    }

    /// The provider's metadata: the one given by hand, or the discovery document (fetched when the cached one is
    /// older than ``OpenIDConnectConfiguration/discoveryLifetime``).
    ///
    /// - Throws: ``OpenIDConnectError/Code/discoveryFailed`` (transient when the fetch failed) or
    ///   ``OpenIDConnectError/Code/discoveryIssuerMismatch``.
    public func providerMetadata() async throws(OpenIDConnectError) -> OpenIDProviderMetadata {
        let now = clock.now()
        let lifetime = configuration.discoveryLifetime.timeInterval
        if let cached = discovery.withLock({ $0 }),
            cached.fetchedAt == .distantFuture || now.timeIntervalSince(cached.fetchedAt) < lifetime
        {
            return cached.metadata
        }
        guard let discoveryURL else {
            throw OpenIDConnectError(.discoveryFailed, "no provider metadata", failureClass: .misconfiguration)
        }
        let body = try await get(discoveryURL, what: "the discovery document", code: .discoveryFailed)
        let metadata = try OpenIDProviderMetadata.parse(body, expectedIssuer: issuer)
        discovery.withLock { $0 = Discovery(metadata: metadata, fetchedAt: now) }
        return metadata
    }

    /// GETs `url` and returns the body of a 2xx answer.
    func get(
        _ url: URL, what: String, code: OpenIDConnectError.Code, bearer: String? = nil, dpopKey: DPoPKey? = nil
    ) async throws(OpenIDConnectError) -> Data {
        let response: HTTPTransportResponse
        do {
            // A resource server's DPoP nonce challenge is answered once, with the nonce it gave.
            response = try await DPoPProofs.answeringNonceChallenge(
                with: dpopKey == nil ? nil : configuration.dpop, from: url
            ) { try await getOnce(url, bearer: bearer, dpopKey: dpopKey) }
        } catch let error as UserSessionError {
            throw OpenIDConnectError(
                code, "fetching \(what) failed: \(error.message)", failureClass: error.failureClass)
        } catch let failure as HTTPExchangeFailure {
            throw OpenIDConnectError(
                code, "fetching \(what) failed: \(failure.message)",
                failureClass: failure.kind == .cancelled ? .cancelled : .transient)
        } catch {
            throw OpenIDConnectError(
                code, "\(what) is at an insecure URL", failureClass: .misconfiguration, underlying: error)
        }
        guard (200..<300).contains(response.statusCode) else {
            let transient = response.statusCode == 408 || response.statusCode == 429 || response.statusCode >= 500
            throw OpenIDConnectError(
                code, "\(what) answered HTTP \(response.statusCode)",
                failureClass: transient ? .transient : .misconfiguration)
        }
        return response.body
    }

    /// One GET of `url`, with `bearer` as a bearer token, or as a DPoP-bound one with a proof signed by `dpopKey`.
    private func getOnce(_ url: URL, bearer: String?, dpopKey: DPoPKey?) async throws -> HTTPTransportResponse {
        var headers: HTTPTransportHeaders = [("Accept", "application/json")]
        if let bearer {
            let authorization = try await DPoPProofs.authorization(
                token: bearer, key: dpopKey, proofs: configuration.dpop, holder: "the configuration", method: "GET",
                url: url)
            for field in authorization { headers.add(name: field.name, value: field.value) }
        }
        return try await client.send(.get, url, headers: headers, timeout: configuration.requestTimeout)
    }

    /// POSTs `fields` as a form to `endpoint` with the client's authentication, through the refresher's code (HTTPS
    /// or loopback, no redirects, the size limit, ``OpenIDConnectConfiguration/requestTimeout``), and returns the
    /// body of a 2xx answer.
    ///
    /// - Throws: `failure.code` with the failure class a refresh would have (OAuth2TokenRefresher's rules), the
    ///   provider's OAuth error code, and a message naming `failure.request`; never one of `secrets`.
    func postAuthenticated(
        _ fields: [(String, String)], to endpoint: URL, named endpointName: String, metadata: OpenIDProviderMetadata,
        secrets: [String], failure: (code: OpenIDConnectError.Code, request: String), dpopKey: DPoPKey? = nil
    ) async throws(OpenIDConnectError) -> Data {
        var providerErrorCode: String?
        do {
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: metadata.tokenEndpoint, clientAuthentication: configuration.clientAuthentication,
                requestTimeout: configuration.requestTimeout, clock: clock, transport: transport,
                dpop: configuration.dpop)
            let client = GuardedHTTPClient(transport: transport, endpointName: endpointName)
            let response = try await refresher.post(
                fields, to: endpoint, through: client, failureCode: .refreshFailed, dpopKey: dpopKey)
            guard (200..<300).contains(response.statusCode) else {
                providerErrorCode = Self.providerErrorCode(inBody: response.body)
                throw OAuth2TokenResponse.failure(
                    status: response.statusCode, body: response.body, secrets: secrets, endpoint: endpointName,
                    code: .refreshFailed)
            }
            return response.body
        } catch let error as UserSessionError {
            throw OpenIDConnectError(
                failure.code, "\(failure.request) failed: \(error.message)", failureClass: error.failureClass,
                providerErrorCode: providerErrorCode ?? Self.providerErrorCode(in: error.message))
        } catch {
            throw OpenIDConnectError(
                failure.code, "\(failure.request) failed (\(type(of: error)))", failureClass: .transient)
        }
    }

    /// Fetches the JWKS named by the provider's metadata.
    func fetchKeySet() async throws(OpenIDConnectError) -> Data {
        try await measure(.keySetFetch) { () async throws(OpenIDConnectError) in
            guard let jwksURI = try await providerMetadata().jwksURI else {
                throw OpenIDConnectError(
                    .keySetFetchFailed, "the provider has no jwks_uri", failureClass: .misconfiguration)
            }
            return try await get(jwksURI, what: "the JWKS", code: .keySetFetchFailed)
        }
    }

    /// The current time.
    var now: Date { clock.now() }
}

#endif
