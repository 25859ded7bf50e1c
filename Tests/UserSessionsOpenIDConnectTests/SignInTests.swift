#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

/// The provider must run where CI runs the tests: a missing python module fails here instead of skipping silently.
struct OpenIDProviderRequirementTests {
    @Test func theProviderRunsWhereItIsRequired() {
        if OpenIDProviderFixture.isRequired {
            #expect(
                OpenIDProviderFixture.isAvailable,
                "python3 cannot import authlib, flask and joserfc: pip install authlib flask")
        }
    }
}

@Suite(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
struct SignInTests {
    @Test("oidcc-client-test (and oidcc-client-test-idtoken-sig-rs256)", arguments: ["RS256", "ES256", "EdDSA"])
    func aSignInWithEachAlgorithmOpensTheSessionWithTheIDTokenKept(algorithm: String) async throws {
        try await OpenIDProviderFixture.with { provider in
            try await provider.signWith(algorithm)
            let client = try provider.client()
            let signIn = try await client.completeSignIn(try await provider.callback(for: client))
            #expect(signIn.prototype.identifier == "248289761001")
            #expect(signIn.prototype.userInfo.email == "alice@example.com")
            #expect(signIn.prototype.userInfo.name == "Alice Liddell")
            let credentials = try #require(signIn.prototype.credentials)
            #expect(credentials.source == .signIn)
            let idToken = try #require(credentials.idToken)
            #expect(!"\(credentials)".contains(idToken) && !"\(signIn)".contains(idToken))
            try await withRegistry { registry in
                let controller = try await registry.open(signIn.prototype)
                #expect(try await controller.accessToken() == credentials.accessToken)
                let stored = try await registry.store.load(identifier: "248289761001")
                #expect(stored?.credentials?.idToken == idToken, "the file store keeps the ID token")
            }
        }
    }

    @Test(arguments: [
        OAuth2TokenRefresher.ClientAuthentication.clientSecretBasic(id: "web-app", secret: "web-secret"),
        .clientSecretPost(id: "post-app", secret: "post-secret"), .publicClient(id: "public-app"),
    ])
    func theCodeIsExchangedWithEachClientAuthentication(
        authentication: OAuth2TokenRefresher.ClientAuthentication
    ) async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client(authentication)
            let signIn = try await client.completeSignIn(try await provider.callback(for: client))
            #expect(signIn.claims.audience == [client.configuration.clientID])
            let expected =
                switch authentication {
                case .clientSecretBasic: "client_secret_basic"
                case .clientSecretPost: "client_secret_post"
                case .publicClient: "none"
                case .privateKeyJWT: "private_key_jwt"
                }
            #expect(try await provider.stats()["last_auth"] as? String == expected)
        }
    }

    @Test func theAuthorizationURLCarriesPKCEStateNonceAndTheOptions() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            let redirect = try await client.authorizationRedirect(
                AuthorizationOptions(
                    prompt: "login", loginHint: "alice@example.com", maximumAuthenticationAge: 600,
                    resources: [URL(string: "https://api.example.com")!], additionalParameters: ["ui_locales": "fr"]))
            let items = URLComponents(url: redirect.url, resolvingAgainstBaseURL: false)?.queryItems ?? []
            var query: [String: String] = [:]
            for item in items { query[item.name] = item.value }
            #expect(query["response_type"] == "code" && query["code_challenge_method"] == "S256")
            #expect(query["scope"]?.split(separator: " ").first == "openid")
            #expect(query["redirect_uri"] == OpenIDProviderFixture.redirectURI.absoluteString)
            #expect(query["prompt"] == "login" && query["login_hint"] == "alice@example.com")
            #expect(query["max_age"] == "600" && query["resource"] == "https://api.example.com")
            #expect(query["ui_locales"] == "fr")
            for name in ["state", "nonce", "code_challenge"] {
                // 256 random bits, base64url: 43 characters.
                #expect(query[name]?.count == 43, "\(name)")
            }
            #expect(query["state"] != query["nonce"])
            #expect(!"\(redirect)".contains(query["state"] ?? "?"))
            // max_age was asked and the user just authenticated: the sign-in completes.
            let signIn = try await client.completeSignIn(
                callbackQuery: try await provider.logIn(redirect.url), sealedPendingSignIn: redirect.sealedPendingSignIn
            )
            #expect(signIn.claims.date("auth_time") != nil)
        }
    }

    @Test func aClientSetParameterCannotBeReplaced() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            await expectRefusal(.invalidConfiguration) {
                _ = try await client.authorizationRedirect(AuthorizationOptions(additionalParameters: ["nonce": "x"]))
            }
        }
    }

    @Test("oidcc-client-test-userinfo-invalid-sub") func theUserInfoIsReadWhenAskedAndItsSubMustMatch() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client { $0.readsUserInfo = true }
            let signIn = try await client.completeSignIn(try await provider.callback(for: client))
            #expect(signIn.userInfoClaims?.subject == "248289761001")
            try await provider.misbehave(["userinfo_sub": "someone-else"])
            let query = try await provider.callback(for: client)
            await expectRefusal(.userInfoFailed) { _ = try await client.completeSignIn(query) }
        }
    }

    @Test func theContextGivenAtTheStartComesBackWithTheSignIn() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            let query = try await provider.callback(for: client, options: AuthorizationOptions(context: ["to": "/a"]))
            let signIn = try await client.completeSignIn(query)
            #expect(signIn.context == ["to": "/a"])
        }
    }

    @Test("oidcc-client-test-rp-init-logout") func signingOutClearsTheSessionAndGivesAURLTheProviderAccepts()
        async throws
    {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            let signIn = try await client.completeSignIn(try await provider.callback(for: client))
            try await withRegistry { registry in
                _ = try await registry.open(signIn.prototype)
                let url = try #require(
                    try await client.signOut(
                        identifier: signIn.prototype.identifier, registry: registry,
                        postLogoutRedirectURI: OpenIDProviderFixture.postLogoutRedirectURI, state: "bye"
                    ).url)
                #expect(try await registry.storedIdentifiers().isEmpty)
                let response = try await URLSessionHTTPTransport().send(
                    HTTPTransportRequest(method: .get, url: url, timeout: .seconds(20), maximumResponseBytes: 1 << 20))
                #expect(response.statusCode == 302)
                #expect(response.headers["Location"] == "http://127.0.0.1/signed-out?state=bye")
                #expect(try await provider.count("logouts") == 1)
            }
        }
    }

    @Test("oidcc-client-test-discovery-openid-config") func discoveryIsCachedAndTheKeySetFetchedOnce() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            for _ in 0..<3 {
                _ = try await client.completeSignIn(try await provider.callback(for: client))
            }
            #expect(try await provider.count("jwks_requests") == 1)
        }
    }

    @Test("oidcc-client-test-discovery-issuer-mismatch") func aDiscoveryDocumentOfAnotherIssuerIsRefused() async throws
    {
        try await OpenIDProviderFixture.with { provider in
            // Same server, but the issuer written with a trailing slash: not byte for byte the document's.
            let configuration = OpenIDConnectConfiguration(
                clientAuthentication: .publicClient(id: "public-app"), redirectURI: OpenIDProviderFixture.redirectURI)
            let client = try OpenIDConnectClient(
                issuer: URL(string: provider.issuer.absoluteString + "/")!, configuration: configuration)
            await expectRefusal(.discoveryIssuerMismatch) { _ = try await client.providerMetadata() }
        }
    }

    @Test func anUnreachableProviderIsATransientDiscoveryFailure() async throws {
        let configuration = OpenIDConnectConfiguration(
            clientAuthentication: .publicClient(id: "public-app"), redirectURI: OpenIDProviderFixture.redirectURI,
            requestTimeout: .seconds(5))
        // Port 9 on loopback: nothing listens (discard), the connection is refused.
        let client = try OpenIDConnectClient(issuer: URL(string: "http://127.0.0.1:9")!, configuration: configuration)
        let error = await expectRefusal(.discoveryFailed) { _ = try await client.providerMetadata() }
        #expect(error?.failureClass == .transient)
    }

    @Test func aManualConfigurationNeedsNoDiscovery() async throws {
        try await OpenIDProviderFixture.with { provider in
            let base = provider.issuer.absoluteString
            let metadata = OpenIDProviderMetadata(
                issuer: base, authorizationEndpoint: URL(string: base + "/authorize")!,
                tokenEndpoint: URL(string: base + "/token")!, jwksURI: URL(string: base + "/jwks")!)
            let client = try OpenIDConnectClient(
                provider: metadata,
                configuration: OpenIDConnectConfiguration(
                    clientAuthentication: .publicClient(id: "public-app"),
                    redirectURI: OpenIDProviderFixture.redirectURI))
            let signIn = try await client.completeSignIn(try await provider.callback(for: client))
            #expect(signIn.prototype.identifier == "248289761001")
        }
    }

    @Test func noneAndHMACCannotBeAllowed() throws {
        for algorithm in ["none", "HS256"] {
            let configuration = OpenIDConnectConfiguration(
                clientAuthentication: .publicClient(id: "app"), redirectURI: OpenIDProviderFixture.redirectURI,
                allowedAlgorithms: [algorithm])
            #expect(throws: OpenIDConnectError.self) { try configuration.validate() }
        }
    }
}
#endif
