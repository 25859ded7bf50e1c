#if Vapor
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `Tests/UserSessionsOpenIDConnectTests/Fixtures/oidc_provider.py` on 127.0.0.1, for one test.
struct VaporProvider {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appending(path: "UserSessionsOpenIDConnectTests").appending(path: "Fixtures")
    static let isAvailable = FixtureServer.pythonCanImport("authlib, flask, joserfc")
    /// The name of the cookie that holds the pending sign-in on loopback HTTP.
    static let signInCookie = "user_session_signin"

    let server: FixtureServer

    static func with<R>(_ body: (VaporProvider) async throws -> R) async throws -> R {
        try await FixtureServer.run(script: "oidc_provider.py", in: directory, timeout: .seconds(60)) {
            try await body(VaporProvider(server: $0))
        }
    }

    /// An OpenID Connect client of the fixture's `web-app` (redirect URI `http://127.0.0.1/callback`).
    func client() throws -> OpenIDConnectClient {
        try OpenIDConnectClient(
            issuer: server.baseURL,
            configuration: OpenIDConnectConfiguration(
                clientAuthentication: .clientSecretBasic(id: "web-app", secret: "web-secret"),
                redirectURI: try #require(URL(string: "http://127.0.0.1/callback")),
                scopes: ["openid", "profile", "email"]))
    }

    /// Starts a sign-in through the server and logs in at the provider as alice: the login's reply, the callback's
    /// query, and the browser holding the pending sign-in's cookie.
    func startSignIn(through client: Browser, returnTo: String = "/") async throws
        -> (login: Reply, query: String, browser: Browser)
    {
        let encoded = returnTo.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        let login = try await client.get("/auth/login?returnTo=" + encoded)
        #expect(login.status == 302, "login redirects to the provider")
        var browser = client
        let pair = try #require(login.setCookie(named: Self.signInCookie)?.first, "login sets the sign-in cookie")
        browser.otherCookies[Self.signInCookie] = String(pair.dropFirst(Self.signInCookie.count + 1))
        let location = try #require(login.location.flatMap { URL(string: $0) })
        let query = try #require(URLComponents(url: location, resolvingAgainstBaseURL: false)?.percentEncodedQuery)
        let form = try await URLSessionHTTPTransport().send(
            HTTPTransportRequest(
                method: .post, url: server.url("/authorize"),
                headers: [("Content-Type", "application/x-www-form-urlencoded")],
                body: Data((query + "&username=alice&password=wonderland").utf8), timeout: .seconds(20),
                maximumResponseBytes: 1 << 20))
        #expect(form.statusCode == 302, "the login form redirects back")
        let callback = try #require(form.headers["Location"].flatMap { URLComponents(string: $0) })
        return (login, callback.percentEncodedQuery ?? "", browser)
    }

    /// Makes the provider mint a logout token with `claims` and POST it to `uri`; the receiver's status.
    func sendLogout(_ claims: [String: Any], to uri: URL) async throws -> Int {
        var body = claims
        body["uri"] = uri.absoluteString
        var request = URLRequest(url: server.url("/control/send-logout"))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONSerialization.data(withJSONObject: body)
        let (data, _) = try await URLSession.shared.data(for: request)
        let answer = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        return try #require(answer?["status"] as? Int)
    }
}
#endif
