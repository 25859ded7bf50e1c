#if Hummingbird
import Foundation
import Hummingbird
import Testing
import UserSessions
import UserSessionsHummingbird
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

// The README's web-session program, compiled and run against the OpenID Connect provider fixture. The lines between
// the BEGIN and END markers are the README's ```swift block under "### Web sessions: the whole program", byte for
// byte, except for its `import` lines, four spaces of indentation, and `ReadmeWebProgramTests.substitutions`.

/// The README's program; `browse` plays the browser while the application serves at the URL it is given.
private func readmeWebProgram(
    issuer: URL, directory: URL, browse: @escaping @Sendable (URL) async throws -> Void
) async throws {
    // BEGIN README WEB PROGRAM
    let environment = ProcessInfo.processInfo.environment
    let secret = "example-secret"
    // 32 random bytes, base64: every instance seals the pending sign-ins browsers keep with it.
    let signInKey = Data(repeating: 7, count: 32)
    let tokensDirectory = directory.appending(path: "tokens")
    let browsersDirectory = directory.appending(path: "browsers")

    let web = WebSessionConfiguration(
        publicURL: try #require(URL(string: "http://127.0.0.1:8080")), postLogoutRedirectPath: "/signed-out")
    let openID = try OpenIDConnectClient(
        issuer: issuer,
        configuration: OpenIDConnectConfiguration(
            clientAuthentication: .clientSecretBasic(id: "example-app", secret: secret), redirectURI: web.callbackURL,
            scopes: ["openid", "profile", "email", "offline_access"],
            pendingSignInKeys: try PendingSignInKeys(current: signInKey)))
    // Refreshes check the ID token a refresh response carries; signing out revokes at the provider's
    // revocation_endpoint, when its discovery document names one.
    let registry = UserSessionRegistry(
        store: FileTokenStore(directory: tokensDirectory), refresher: try await openID.tokenRefresher())
    let sessions = try WebSessions(
        openID: openID, registry: registry, store: FileWebSessionStore(directory: browsersDirectory),
        configuration: web)

    let router = Router(context: BasicWebSessionRequestContext.self)
    router.add(middleware: sessions.securityHeadersMiddleware())
    router.add(middleware: sessions.crossSiteRequestMiddleware())
    sessions.addRoutes(to: router)
    // Public: the provider sends the signed-out browser here, with the state POST /auth/logout sent.
    router.get("signed-out") { request, _ in
        (try? sessions.verifyPostLogoutState(request)) == nil ? "Signed out." : "Signed out at the provider too."
    }
    // Behind the session: signed-out navigations go to /auth/login; responses are never cached.
    router.group().add(middleware: sessions.middleware(.required))
        .get("/") { _, context in "Hello, \(try context.requireIdentity().record.claims["name"] ?? "")" }

    let app = router
    try await withLiveServer(app, browse)
    await registry.shutdown()
    // END README WEB PROGRAM
    _ = environment
}

@Suite(.enabled(if: Provider.isAvailable, "python3 with authlib and flask"))
struct ReadmeWebProgramTests {
    /// What differs between the README's block and the program above.
    static let substitutions: [(readme: String, here: String)] = [
        (#"environment["CLIENT_SECRET"] ?? """#, #""example-secret""#),
        (#"Data(base64Encoded: environment["SIGN_IN_KEY"] ?? "") ?? Data()"#, "Data(repeating: 7, count: 32)"),
        (#"URL(fileURLWithPath: "/var/lib/app/tokens")"#, #"directory.appending(path: "tokens")"#),
        (#"URL(fileURLWithPath: "/var/lib/app/browsers")"#, #"directory.appending(path: "browsers")"#),
        (#"URL(string: "https://app.example.com")!"#, #"try #require(URL(string: "http://127.0.0.1:8080"))"#),
        (#"URL(string: "https://accounts.example.com")!"#, "issuer"),
        (#"id: "app""#, #"id: "example-app""#),
        (
            #"Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 8080)))"#,
            "router"
        ),
        ("try await app.runService()", "try await withLiveServer(app, browse)"),
    ]

    @Test func theProgramHereIsTheReadmesWebProgram() throws {
        let difference = try ReadmeBlock.difference(
            heading: "### Web sessions: the whole program", substitutions: Self.substitutions,
            sourceFile: #filePath, marker: "README WEB PROGRAM")
        #expect(difference == nil, "\(difference ?? "")")
    }

    @Test func theReadmesWebProgramSignsABrowserInAndShowsThePage() async throws {
        try await Provider.with { provider in
            try await withTemporaryDirectory { directory in
                try await readmeWebProgram(issuer: provider.issuer, directory: directory) { base in
                    let client = Client(base: base)
                    let page = try await client.get("/", headers: [("Accept", "text/html")])
                    #expect(page.status == 302 && page.location?.hasPrefix("/auth/login?returnTo=") == true)
                    #expect(page.headers["X-Frame-Options"] == "DENY", "the security headers are on")
                    let callback = try await provider.signIn(through: client)
                    var browser = client
                    let cookie = try #require(callback.cookieValue("user_session"))
                    browser.cookie = cookie
                    let hello = try await browser.get("/")
                    #expect(hello.text == "Hello, Alice Liddell")
                    #expect(hello.headers["Cache-Control"] == "no-store")
                    #expect(try await client.get("/signed-out").text == "Signed out.")
                }
            }
        }
    }
}
#endif
