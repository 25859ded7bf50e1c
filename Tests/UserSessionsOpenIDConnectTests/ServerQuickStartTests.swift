#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

// The README's quick start for servers, compiled and run against the OpenID Connect provider fixture. The lines
// between the BEGIN and END markers are the README's ```swift block under "## Quick start for servers: sign in with
// OpenID Connect", byte for byte, except for its `import` lines, four spaces of indentation, and the substitutions
// in `ServerQuickStartTests.substitutions`. `theProgramHereIsTheReadmesServerQuickStart` fails when they differ.

/// Stands in for the browser and the application's routes: follows the redirect to the provider's login form,
/// signs in as alice, and returns the query of the callback.
private struct Browser {
    let provider: OpenIDProviderFixture

    func signIn(at url: URL) async throws -> String {
        try await provider.logIn(url)
    }
}

/// The README's program; returns what it produced.
private func readmeServerQuickStart(storeDirectory: URL, issuer: URL, browser: Browser) async throws
    -> (signIn: OpenIDSignIn, token: String, logout: ProviderLogout, registry: UserSessionRegistry)
{
    // BEGIN README SERVER QUICK START
    let registry = UserSessionRegistry(store: FileTokenStore(directory: storeDirectory))
    let oidc = try OpenIDConnectClient(
        issuer: issuer,
        configuration: OpenIDConnectConfiguration(
            clientAuthentication: .clientSecretBasic(id: "web-app", secret: "web-secret"),
            redirectURI: OpenIDProviderFixture.redirectURI))

    // GET /login: redirect the browser to the provider, and keep the sealed pending sign-in in that browser.
    let redirect = try await oidc.authorizationRedirect()
    let cookie = redirect.sealedPendingSignIn  // your route: Set-Cookie (HttpOnly, SameSite=Lax, short-lived)
    let callbackQuery = try await browser.signIn(at: redirect.url)  // your routes: 302 out, then GET /callback?…

    // GET /callback: only with the cookie of the browser that started it (no login CSRF); state, PKCE, the ID
    // token's signature and claims are all checked, or nothing is opened.
    let signIn = try await oidc.completeSignIn(callbackQuery: callbackQuery, sealedPendingSignIn: cookie)
    let controller = try await registry.open(signIn.prototype)

    // Every request of that user: a valid access token (refreshed when needed, once).
    let token = try await controller.accessToken()

    // POST /logout: close and clear the session, then redirect the browser to the provider's logout
    // (`.notOffered` when it has none, `.unavailable(error)` when its metadata could not be read).
    let logout = try await oidc.signOut(
        identifier: signIn.prototype.identifier, registry: registry,
        postLogoutRedirectURI: OpenIDProviderFixture.postLogoutRedirectURI)
    // END README SERVER QUICK START
    return (signIn, token, logout, registry)
}

struct ServerQuickStartTests {
    /// What differs between the README's block and the program above.
    static let substitutions: [(readme: String, here: String)] = [
        ("FileTokenStore.defaultDirectory()", "storeDirectory"),
        (#"URL(string: "https://accounts.example.com")!"#, "issuer"),
        (#"URL(string: "https://app.example.com/callback")!"#, "OpenIDProviderFixture.redirectURI"),
        (#"URL(string: "https://app.example.com/signed-out")!"#, "OpenIDProviderFixture.postLogoutRedirectURI"),
    ]

    @Test func theProgramHereIsTheReadmesServerQuickStart() throws {
        let difference = try ReadmeBlock.difference(
            heading: "## Quick start for servers: sign in with OpenID Connect", substitutions: Self.substitutions,
            sourceFile: #filePath, marker: "README SERVER QUICK START")
        #expect(difference == nil, "\(difference ?? "")")
    }

    @Test(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
    func theReadmesServerQuickStartSignsInAndOutAgainstARealProvider() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "server-quick-start-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await OpenIDProviderFixture.with { provider in
            let (signIn, token, logout, registry) = try await readmeServerQuickStart(
                storeDirectory: directory, issuer: provider.issuer,
                browser: Browser(provider: provider))
            #expect(token == signIn.prototype.credentials?.accessToken)
            #expect(try await registry.storedIdentifiers().isEmpty, "signed out locally")
            let url = try #require(logout.url)
            let query = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems ?? []
            #expect(query.contains { $0.name == "id_token_hint" && $0.value == signIn.prototype.credentials?.idToken })
            await registry.shutdown()
        }
    }
}
#endif
