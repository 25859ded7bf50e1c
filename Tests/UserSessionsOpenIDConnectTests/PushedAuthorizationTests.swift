#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

/// Pushed authorization requests (RFC 9126) against the provider fixture (issue 27).
@Suite(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
struct PushedAuthorizationTests {
    /// The query items of `url`, by name.
    private func query(_ url: URL) -> [String: String] {
        var query: [String: String] = [:]
        for item in URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems ?? [] {
            query[item.name] = item.value
        }
        return query
    }

    @Test func aProviderThatRequiresPARGetsThePushAndTheBrowserOnlyARequestURI() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await provider.pushedAuthorizationRequests(required: true)
            let client = try provider.client()
            let redirect = try await client.authorizationRedirect(AuthorizationOptions(loginHint: "alice"))
            let browser = query(redirect.url)
            #expect(Set(browser.keys) == ["client_id", "request_uri"])
            #expect(browser["client_id"] == "web-app")
            #expect(browser["request_uri"]?.hasPrefix("urn:ietf:params:oauth:request_uri:") == true)
            let pushed = try #require(try await provider.pushedRequests().first)
            #expect(pushed["code_challenge_method"] == "S256" && pushed["code_challenge"]?.count == 43)
            #expect(pushed["state"]?.count == 43 && pushed["nonce"]?.count == 43 && pushed["login_hint"] == "alice")
            #expect(pushed["redirect_uri"] == OpenIDProviderFixture.redirectURI.absoluteString)
            #expect(try await provider.stats()["last_auth_par"] as? String == "client_secret_basic")
            let signIn = try await client.completeSignIn(
                callbackQuery: try await provider.logIn(redirect.url), sealedPendingSignIn: redirect.sealedPendingSignIn
            )
            #expect(signIn.prototype.identifier == "248289761001")
        }
    }

    @Test func theConfigurationCanAskForPARAndItIsAuthenticatedWithAnAssertion() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await provider.pushedAuthorizationRequests(required: false)
            let signer = try await provider.usePrivateKeyJWT(for: "web-app", algorithm: .edDSA)
            let client = try provider.client(
                .privateKeyJWT(id: "web-app", audience: .issuer(provider.issuer.absoluteString), signer: signer)
            ) { $0.pushesAuthorizationRequests = true }
            let callback = try await provider.callback(for: client)
            let signIn = try await client.completeSignIn(callback)
            #expect(signIn.claims.audience == ["web-app"])
            let stats = try await provider.stats()
            #expect(stats["par_requests"] as? Int == 1)
            #expect(stats["last_auth_par"] as? String == "private_key_jwt")
            #expect(stats["last_auth"] as? String == "private_key_jwt")
        }
    }

    @Test func withoutBeingAskedOrRequiredTheRequestGoesThroughTheBrowser() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await provider.pushedAuthorizationRequests(required: false)
            let client = try provider.client()
            let redirect = try await client.authorizationRedirect()
            #expect(query(redirect.url)["code_challenge"] != nil && query(redirect.url)["request_uri"] == nil)
            #expect(try await provider.count("par_requests") == 0)
        }
    }

    @Test func theProviderRefusesAFrontChannelRequestWhenPARIsRequired() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await provider.pushedAuthorizationRequests(required: true)
            // Metadata written by hand without PAR: the client sends the request through the browser.
            let base = provider.issuer.absoluteString
            let client = try OpenIDConnectClient(
                provider: OpenIDProviderMetadata(
                    issuer: base, authorizationEndpoint: try #require(URL(string: base + "/authorize")),
                    tokenEndpoint: try #require(URL(string: base + "/token")),
                    jwksURI: URL(string: base + "/jwks")),
                configuration: OpenIDConnectConfiguration(
                    clientAuthentication: .clientSecretBasic(id: "web-app", secret: "web-secret"),
                    redirectURI: OpenIDProviderFixture.redirectURI))
            let redirect = try await client.authorizationRedirect()
            let response = try await URLSessionHTTPTransport().send(
                HTTPTransportRequest(
                    method: .get, url: redirect.url, timeout: .seconds(20), maximumResponseBytes: 1 << 20))
            #expect(response.statusCode == 400)
            #expect(String(decoding: response.body, as: UTF8.self).contains("invalid_request"))
            #expect(try await provider.count("front_channel_refused") == 1)
        }
    }

    @Test func askingForPARAtAProviderWithoutItIsAMisconfiguration() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client { $0.pushesAuthorizationRequests = true }
            let error = await expectRefusal(.invalidConfiguration) { _ = try await client.authorizationRedirect() }
            #expect(error?.failureClass == .misconfiguration)
        }
    }

    @Test(arguments: [
        ("no_request_uri", RefreshFailureClass.transient), ("bad_expires_in", .transient),
        ("server_error", .transient), ("redirect", .transient), ("invalid_client", .misconfiguration),
    ])
    func aFailedPushIsATypedErrorOfItsClass(fault: String, failureClass: RefreshFailureClass) async throws {
        try await OpenIDProviderFixture.with { provider in
            try await provider.pushedAuthorizationRequests(required: true)
            try await provider.misbehave(["par": fault])
            let client = try provider.client()
            let error = await expectRefusal(.pushedAuthorizationFailed) {
                _ = try await client.authorizationRedirect()
            }
            #expect(error?.failureClass == failureClass, "\(String(describing: error))")
            if fault == "redirect" { #expect(error?.message.contains("redirects are not followed") == true) }
            // The fault was for one answer only: the next sign-in is pushed.
            let redirect = try await client.authorizationRedirect()
            #expect(query(redirect.url)["request_uri"] != nil)
        }
    }

    @Test func aClientTheProviderDoesNotKnowIsRefusedAsMisconfiguration() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await provider.pushedAuthorizationRequests(required: true)
            let client = try provider.client(.clientSecretBasic(id: "web-app", secret: "not-the-secret-x9"))
            let error = await expectRefusal(.pushedAuthorizationFailed) {
                _ = try await client.authorizationRedirect()
            }
            #expect(error?.failureClass == .misconfiguration)
            #expect(error?.providerErrorCode == "invalid_client")
            #expect(!"\(String(describing: error))".contains("not-the-secret-x9"))
        }
    }

    @Test func anUnreachablePushEndpointIsTransient() async throws {
        try await OpenIDProviderFixture.with { provider in
            let base = provider.issuer.absoluteString
            let client = try OpenIDConnectClient(
                provider: OpenIDProviderMetadata(
                    issuer: base, authorizationEndpoint: try #require(URL(string: base + "/authorize")),
                    tokenEndpoint: try #require(URL(string: base + "/token")),
                    jwksURI: URL(string: base + "/jwks"),
                    pushedAuthorizationRequestEndpoint: URL(string: "http://127.0.0.1:9/par"),
                    requiresPushedAuthorizationRequests: true),
                configuration: OpenIDConnectConfiguration(
                    clientAuthentication: .clientSecretBasic(id: "web-app", secret: "web-secret"),
                    redirectURI: OpenIDProviderFixture.redirectURI, requestTimeout: .seconds(5)))
            let error = await expectRefusal(.pushedAuthorizationFailed) {
                _ = try await client.authorizationRedirect()
            }
            #expect(error?.failureClass == .transient)
        }
    }
}
#endif
