#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

// The README's FAPI 2.0 quick start, compiled and run against the OpenID Connect provider fixture switched to the
// FAPI 2.0 profile. The lines between the BEGIN and END markers are the README's ```swift block under "### The FAPI
// 2.0 profile: tokens a thief cannot use", byte for byte, except for four spaces of indentation and the
// substitutions in `FAPI2QuickStartTests.substitutions`.

/// Stands in for the browser: follows the redirect to the provider's login form and signs in as alice.
private struct Browser {
    let provider: OpenIDProviderFixture

    func signIn(at url: URL) async throws -> String { try await provider.logIn(url) }
}

/// The README's program; returns the headers it made and the session's credentials.
private func readmeFAPI2QuickStart(
    issuer: URL, clientKeyPEM: String, clientKeyID: String, browser: Browser, redirectURI: URL, storeDirectory: URL,
    api: URL
) async throws -> (headers: HTTPTransportHeaders, signIn: OpenIDSignIn, registry: UserSessionRegistry) {
    // BEGIN README FAPI2 QUICK START
    let oidc = try OpenIDConnectClient(
        issuer: issuer,
        configuration: OpenIDConnectConfiguration(
            clientAuthentication: .privateKeyJWT(
                id: "example-app", audience: .issuer(issuer.absoluteString),
                signer: try PrivateKeyJWTSigner(pem: clientKeyPEM, algorithm: .es256, keyID: clientKeyID)),
            redirectURI: redirectURI,
            dpop: DPoPProofs(signer: DPoPSigner()),
            profile: .fapi2))

    // Sessions refresh with the client's refresher, which signs every refresh's proof with the session's key.
    let registry = UserSessionRegistry(
        store: FileTokenStore(directory: storeDirectory), refresher: try await oidc.tokenRefresher())

    // The sign-in as above: the request is pushed (the URL carries only client_id and request_uri).
    let redirect = try await oidc.authorizationRedirect()
    let callbackQuery = try await browser.signIn(at: redirect.url)
    let signIn = try await oidc.completeSignIn(
        callbackQuery: callbackQuery, sealedPendingSignIn: redirect.sealedPendingSignIn)
    let controller = try await registry.open(signIn.prototype)  // the credentials carry the session's DPoP key

    // Requests to your APIs: `Authorization: DPoP …` and a proof for this method and URL.
    let headers = try await controller.authorizationHeaders(method: "GET", url: api)
    // END README FAPI2 QUICK START
    return (headers, signIn, registry)
}

struct FAPI2QuickStartTests {
    /// What differs between the README's block and the program above.
    static let substitutions: [(readme: String, here: String)] = [
        (#"URL(string: "https://accounts.example.com")!"#, "issuer"),
        (#".issuer("https://accounts.example.com")"#, ".issuer(issuer.absoluteString)"),
        (#""web-app""#, #""example-app""#),
        (#"URL(string: "https://app.example.com/callback")!"#, "redirectURI"),
        ("FileTokenStore.defaultDirectory()", "storeDirectory"),
        (#"URL(string: "https://api.example.com/me")!"#, "api"),
    ]

    @Test func theProgramHereIsTheReadmesFAPI2QuickStart() throws {
        let difference = try ReadmeBlock.difference(
            heading: "### The FAPI 2.0 profile: tokens a thief cannot use", substitutions: Self.substitutions,
            sourceFile: #filePath, marker: "README FAPI2 QUICK START")
        #expect(difference == nil, "\(difference ?? "")")
    }

    @Test(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
    func theReadmesFAPI2QuickStartSignsInWithABoundTokenThatTheAPIAccepts() async throws {
        try await OpenIDProviderFixture.with { provider in
            _ = try await provider.control("/control/fapi", ["enabled": true])
            try await provider.signWith("ES256")
            let key = try await provider.control("/control/client-key", ["client": "example-app", "alg": "ES256"])
            let directory = FileManager.default.temporaryDirectory.appending(path: "fapi2-quick-start-\(UUID())")
            defer { try? FileManager.default.removeItem(at: directory) }
            let api = provider.server.url("/api/profile")
            let (headers, signIn, registry) = try await readmeFAPI2QuickStart(
                issuer: provider.issuer, clientKeyPEM: try #require(key["pem"] as? String),
                clientKeyID: try #require(key["kid"] as? String), browser: Browser(provider: provider),
                redirectURI: try #require(URL(string: "http://127.0.0.1:8080/auth/callback")),
                storeDirectory: directory,
                api: api)
            #expect(signIn.prototype.credentials?.dpopKey != nil)
            #expect(headers["Authorization"]?.hasPrefix("DPoP ") == true && headers["DPoP"] != nil)
            let answer = try await URLSessionHTTPTransport().send(
                HTTPTransportRequest(
                    method: .get, url: api, headers: headers, timeout: .seconds(20), maximumResponseBytes: 1 << 20))
            #expect(answer.statusCode == 200)
            let stats = try await provider.stats()
            #expect(stats["par_requests"] as? Int == 1 && stats["last_auth"] as? String == "private_key_jwt")
            #expect(stats["dpop_token_requests"] as? Int == 1 && stats["dpop_refused"] as? Int == 0)
            await registry.shutdown()
        }
    }
}
#endif
