#if OpenIDConnect
import Foundation
import UserSessions

/// The optional parameters of an authorization request.
public struct AuthorizationOptions: Sendable, Hashable {
    /// `prompt` (for example `login` or `none`).
    public var prompt: String?
    /// `login_hint`: who is expected to sign in.
    public var loginHint: String?
    /// `max_age` in seconds: the sign-in fails with ``OpenIDConnectError/Code/authenticationTooOld`` when the user
    /// authenticated longer ago.
    public var maximumAuthenticationAge: Int?
    /// `resource` indicators (RFC 8707).
    public var resources: [URL]
    /// Scopes requested in addition to the configured ones.
    public var additionalScopes: [String]
    /// Further parameters, sent in the order given. They cannot replace the ones the client sets.
    public var additionalParameters: [String: String]
    /// Kept with the pending sign-in and handed back by the callback (for example where to return).
    public var context: [String: String]

    /// Creates options; every one is optional.
    public init(
        prompt: String? = nil, loginHint: String? = nil, maximumAuthenticationAge: Int? = nil, resources: [URL] = [],
        additionalScopes: [String] = [], additionalParameters: [String: String] = [:], context: [String: String] = [:]
    ) {
        self.prompt = prompt
        self.loginHint = loginHint
        self.maximumAuthenticationAge = maximumAuthenticationAge
        self.resources = resources
        self.additionalScopes = additionalScopes
        self.additionalParameters = additionalParameters
        self.context = context
    }
}

/// Where to send the browser to sign in, and the pending sign-in that browser keeps until the callback.
public struct AuthorizationRedirect: Sendable, Hashable, CustomStringConvertible {
    /// The authorization URL, with `state`, `nonce` and the PKCE challenge.
    public var url: URL
    /// When the pending sign-in expires.
    public var expiresAt: Date
    /// The pending sign-in (its `state`, `nonce`, PKCE verifier and context), sealed with
    /// ``OpenIDConnectConfiguration/pendingSignInKeys`` (AES-256-GCM), as at most 3,800 base64url characters.
    ///
    /// Keep it in the browser that started the sign-in, in a short-lived `HttpOnly` cookie (`__Host-` prefixed
    /// and `Secure` on HTTPS, `SameSite=Lax` so the provider's top-level redirect back carries it), and hand it to
    /// ``OpenIDConnectClient/completeSignIn(callbackQuery:sealedPendingSignIn:)`` at the callback: a callback
    /// without it completes nothing. It is a secret: never log it or put it in a URL.
    public var sealedPendingSignIn: String

    /// The URL's endpoint without its query (which holds the state); never the sealed pending sign-in.
    public var description: String {
        var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        components?.query = nil
        return "AuthorizationRedirect(\(components?.string ?? "?"), expiresAt: \(expiresAt))"
    }
}

extension OpenIDConnectClient {
    /// The parameters the client sets itself, which ``AuthorizationOptions/additionalParameters`` cannot replace.
    static let reservedParameters: Set<String> = [
        "response_type", "client_id", "redirect_uri", "scope", "state", "nonce", "code_challenge",
        "code_challenge_method", "prompt", "login_hint", "max_age", "resource", "request_uri", "client_assertion",
        "client_assertion_type", "client_secret", "dpop_jkt",
    ]

    /// Starts a sign-in: makes a pending sign-in (fresh `state`, `nonce` and PKCE verifier of 256 random bits
    /// each) and returns the URL to redirect the browser to, with the pending sign-in sealed for that browser
    /// (``AuthorizationRedirect/sealedPendingSignIn``).
    ///
    /// When the provider requires pushed authorization requests, or ``OpenIDConnectConfiguration/pushesAuthorizationRequests``
    /// asks for them, the request is first POSTed, with the client's authentication, to the provider's pushed
    /// authorization request endpoint (RFC 9126), and the URL carries only `client_id` and the `request_uri` it
    /// answered.
    ///
    /// With ``PendingSignInStorage/browser`` (the default) the server keeps nothing. With
    /// ``PendingSignInStorage/stateStore`` the pending sign-in is also recorded in the state store, and the one
    /// sealed in `earlier` (the browser's previous, unfinished sign-in) is removed from it first, so one browser
    /// holds at most one there.
    ///
    /// - Parameters:
    ///   - options: The optional parameters of the request.
    ///   - earlier: The sealed pending sign-in the browser still holds from an earlier start, if any.
    /// - Throws: ``OpenIDConnectError/Code/storeFailure`` (state store only), the errors of ``providerMetadata()``,
    ///   ``OpenIDConnectError/Code/pushedAuthorizationFailed`` when the push fails (with its
    ///   ``OpenIDConnectError/failureClass``), or ``OpenIDConnectError/Code/invalidConfiguration`` for an additional
    ///   parameter the client sets itself, a context too large to seal into a cookie, or pushed authorization
    ///   requests asked for at a provider without the endpoint.
    public func authorizationRedirect(
        _ options: AuthorizationOptions = AuthorizationOptions(), replacing earlier: String? = nil
    ) async throws(OpenIDConnectError) -> AuthorizationRedirect {
        for name in options.additionalParameters.keys.sorted() where Self.reservedParameters.contains(name) {
            throw OpenIDConnectError(
                .invalidConfiguration, "the parameter \(name) is set by the client", failureClass: .misconfiguration)
        }
        let metadata = try await providerMetadata()
        try Self.checkSecure(metadata.authorizationEndpoint, named: "the authorization endpoint")
        try checkProfile(metadata)
        let now = self.now
        var pending = PendingSignIn(
            state: SignInSecrets.random(), nonce: SignInSecrets.random(), codeVerifier: SignInSecrets.random(),
            redirectURI: configuration.redirectURI, maximumAuthenticationAge: options.maximumAuthenticationAge,
            context: options.context, createdAt: now,
            expiresAt: now.addingTimeInterval(configuration.pendingSignInLifetime.timeInterval))
        var scopes = ["openid"]
        for scope in configuration.scopes + options.additionalScopes where !scopes.contains(scope) {
            scopes.append(scope)
        }
        var parameters: [(String, String)] = [
            ("response_type", "code"), ("client_id", configuration.clientID),
            ("redirect_uri", configuration.redirectURI.absoluteString), ("scope", scopes.joined(separator: " ")),
            ("state", pending.state), ("nonce", pending.nonce),
            ("code_challenge", SignInSecrets.challenge(for: pending.codeVerifier)), ("code_challenge_method", "S256"),
        ]
        if let dpop = configuration.dpop {
            do {
                let key = try dpop.makeKey()
                parameters.append(("dpop_jkt", try dpop.thumbprint(of: key)))
                pending.dpopKey = key
            } catch {
                throw OpenIDConnectError(
                    .invalidConfiguration, "the sign-in's DPoP key could not be made: \(error.message)",
                    failureClass: .misconfiguration)
            }
        }
        if let prompt = options.prompt { parameters.append(("prompt", prompt)) }
        if let loginHint = options.loginHint { parameters.append(("login_hint", loginHint)) }
        if let maxAge = options.maximumAuthenticationAge { parameters.append(("max_age", String(maxAge))) }
        for resource in options.resources { parameters.append(("resource", resource.absoluteString)) }
        for name in options.additionalParameters.keys.sorted() {
            parameters.append((name, options.additionalParameters[name] ?? ""))
        }
        let url: URL
        if let endpoint = try pushedAuthorizationRequestEndpoint(in: metadata) {
            let requestURI = try await pushAuthorizationRequest(
                parameters, to: endpoint, metadata: metadata, secrets: [pending.state, pending.nonce])
            url = try Self.url(
                metadata.authorizationEndpoint,
                adding: [("client_id", configuration.clientID), ("request_uri", requestURI)])
        } else {
            url = try Self.url(metadata.authorizationEndpoint, adding: parameters)
        }
        let sealed = try configuration.pendingSignInKeys.seal(pending, binding: sealingBinding)
        if configuration.pendingSignInStorage.usesStateStore {
            do {
                if let earlier, let replaced = configuration.pendingSignInKeys.open(earlier, binding: sealingBinding) {
                    _ = try await stateStore.take(state: replaced.state, now: now)
                }
                try await stateStore.insert(pending, limit: configuration.maximumPendingSignIns, now: now)
            } catch let error as OpenIDConnectError {
                throw error
            } catch {
                throw Self.storeFailure(error)
            }
        }
        return AuthorizationRedirect(url: url, expiresAt: pending.expiresAt, sealedPendingSignIn: sealed)
    }

    /// Checks `metadata` against ``OpenIDConnectConfiguration/profile``: under FAPI 2.0 the provider must push
    /// (name a PAR endpoint), accept PKCE S256 and send `iss` in authorization responses, and must accept the DPoP
    /// algorithm when it lists some.
    func checkProfile(_ metadata: OpenIDProviderMetadata) throws(OpenIDConnectError) {
        func refuse(_ what: String) -> OpenIDConnectError {
            OpenIDConnectError(
                .invalidConfiguration, "FAPI 2.0: the provider \(what)", failureClass: .misconfiguration)
        }
        if let dpop = configuration.dpop, let algorithms = metadata.dpopSigningAlgorithmsSupported,
            !algorithms.contains(dpop.algorithm.rawValue)
        {
            throw OpenIDConnectError(
                .invalidConfiguration, "the provider does not accept \(dpop.algorithm) DPoP proofs",
                failureClass: .misconfiguration)
        }
        guard configuration.profile == .fapi2 else { return }
        if metadata.pushedAuthorizationRequestEndpoint == nil { throw refuse("names no pushed authorization endpoint") }
        if let methods = metadata.codeChallengeMethodsSupported, !methods.contains("S256") {
            throw refuse("does not accept PKCE S256")
        }
        if !metadata.authorizationResponseIssuerParameterSupported {
            throw refuse("does not send iss in its authorization responses (RFC 9207)")
        }
    }

    /// What a sealed pending sign-in is bound to: this issuer and client id, so another client's never opens here.
    var sealingBinding: String { "user-sessions pending sign-in v1\n" + issuer + "\n" + configuration.clientID }

    /// `endpoint` with `parameters` appended to its query, form-encoded.
    static func url(_ endpoint: URL, adding parameters: [(String, String)]) throws(OpenIDConnectError) -> URL {
        let encoded = parameters.map { percentEncode($0.0) + "=" + percentEncode($0.1) }.joined(separator: "&")
        var text = endpoint.absoluteString
        if let hash = text.firstIndex(of: "#") { text = String(text[..<hash]) }
        text += (endpoint.query?.isEmpty == false ? "&" : "?") + encoded
        guard let url = URL(string: text) else {
            throw OpenIDConnectError(.invalidConfiguration, "cannot build a URL on \(endpoint.absoluteString)")
        }
        return url
    }

    /// `text` with everything but RFC 3986's unreserved characters percent-encoded.
    static func percentEncode(_ text: String) -> String {
        var unreserved = CharacterSet.alphanumerics
        unreserved.insert(charactersIn: "-._~")
        var result = ""
        for byte in text.utf8 {
            let scalar = Unicode.Scalar(byte)
            if byte < 0x80, unreserved.contains(scalar) {
                result.unicodeScalars.append(scalar)
            } else {
                result += String(format: "%%%02X", byte)
            }
        }
        return result
    }

    static func storeFailure(_ error: any Error) -> OpenIDConnectError {
        OpenIDConnectError(
            .storeFailure, "the OpenID Connect state store failed (\(type(of: error)))", failureClass: .transient,
            underlying: error)
    }
}
#endif
