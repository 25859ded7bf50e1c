#if Vapor
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsVapor
import Vapor

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The Vapor application the tests run: the sign-in routes under `/auth`, the CSRF middleware for every route, a
/// page behind the session middleware under `/app`, and the proxy at `/upstream` when an upstream is given.
struct VaporHarness {
    let sessions: WebSessions
    let registry: UserSessionRegistry

    /// Web sessions over `openID` (default: a client of a provider that is never contacted) and a registry over
    /// `tokenStore`.
    init(
        openID: OpenIDConnectClient? = nil, tokenStore: any TokenStore = InMemoryTokenStore(),
        store: any WebSessionStore = InMemoryWebSessionStore(), publicURL: String = "http://127.0.0.1:8080"
    ) throws {
        registry = UserSessionRegistry(store: tokenStore)
        let unused = try #require(URL(string: "http://127.0.0.1:9"))
        let openID =
            try openID
            ?? OpenIDConnectClient(
                issuer: unused,
                configuration: OpenIDConnectConfiguration(
                    clientAuthentication: .clientSecretBasic(id: "web-app", secret: "web-secret"),
                    redirectURI: try #require(URL(string: "http://127.0.0.1/callback"))))
        let configuration = WebSessionConfiguration(publicURL: try #require(URL(string: publicURL)))
        sessions = try WebSessions(openID: openID, registry: registry, store: store, configuration: configuration)
    }

    func configure(_ app: Application, upstream: TokenForwardingProxy?) {
        app.middleware.use(sessions.securityHeadersMiddleware(), at: .beginning)
        app.middleware.use(sessions.crossSiteRequestMiddleware())
        sessions.addRoutes(to: app)
        let pages = app.grouped("app").grouped(sessions.middleware(.required))
        pages.get("page") { request async throws -> String in
            "hello " + (try request.auth.require(WebSession.self).record.claims["name"] ?? "?")
        }
        app.post("change") { _ in "changed" }
        if let upstream { sessions.addProxy(upstream, at: "/upstream", to: app) }
    }

    /// Runs the application on a free port of 127.0.0.1 for `body`, then shuts it and the registry down.
    func run<R>(upstream: TokenForwardingProxy? = nil, _ body: (Browser) async throws -> R) async throws -> R {
        let result = try await withVaporServer({ configure($0, upstream: upstream) }) { base in
            try await body(Browser(base: base, cookieName: sessions.configuration.cookieName))
        }
        await registry.shutdown()
        return result
    }

    /// Opens alice's session without a provider; returns the cookie's value.
    func signInAlice(token: String = "token-1") async throws -> String {
        let prototype = UserSessionPrototype(
            identifier: "alice",
            userInfo: UserInfo(id: "248289761001", email: "alice@example.com", name: "Alice Liddell"),
            credentials: Credentials(
                accessToken: token, refreshToken: "refresh-" + token, expiresAt: Date(timeIntervalSinceNow: 3600)))
        return try await sessions.openBrowserSession(prototype, sessionID: "sid-1", replacingCookie: nil).value
    }
}

/// A Vapor application configured by `configure`, serving on 127.0.0.1 (a free port) for `body`, shut down after.
func withVaporServer<R>(
    _ configure: (Application) throws -> Void, _ body: (URL) async throws -> R
) async throws -> R {
    let app = try await Application.make(.testing)
    app.logger.logLevel = .critical
    do {
        try configure(app)
        try await app.server.start(address: .hostname("127.0.0.1", port: 0))
        let port = try #require(app.http.server.shared.localAddress?.port)
        let result = try await body(try #require(URL(string: "http://127.0.0.1:\(port)")))
        await app.server.shutdown()
        try await app.asyncShutdown()
        return result
    } catch {
        await app.server.shutdown()
        try? await app.asyncShutdown()
        throw error
    }
}

/// One answer of the server under test.
struct Reply {
    var status: Int
    var headers: HTTPTransportHeaders
    var body: Data

    var text: String { String(decoding: body, as: UTF8.self) }
    var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }
    var location: String? { headers["Location"] }

    /// Every `Set-Cookie` of the reply (headers a transport joined with `, ` are split again), each as its parts.
    var setCookies: [[String]] {
        headers.values(for: "Set-Cookie").flatMap { $0.components(separatedBy: ", ") }.map {
            $0.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        }
    }

    /// The parts of the `Set-Cookie` for `name`, if any.
    func setCookie(named name: String) -> [String]? {
        setCookies.first { $0.first?.hasPrefix(name + "=") == true }
    }
}

/// A browser stand-in: sends requests with its cookies and follows nothing.
struct Browser {
    let base: URL
    let cookieName: String
    var cookie: String?
    /// Other cookies the browser holds (the pending sign-in's), sent after the session cookie.
    var otherCookies: [String: String] = [:]

    func send(_ method: String, _ path: String, headers: [(String, String)] = [], body: Data? = nil) async throws
        -> Reply
    {
        var fields = HTTPTransportHeaders()
        for (name, value) in headers { fields.add(name: name, value: value) }
        var pairs: [String] = []
        if let cookie { pairs.append("\(cookieName)=\(cookie)") }
        for name in otherCookies.keys.sorted() { pairs.append("\(name)=\(otherCookies[name] ?? "")") }
        if !pairs.isEmpty { fields.add(name: "Cookie", value: pairs.joined(separator: "; ")) }
        let url = try #require(URL(string: base.absoluteString + path))
        let response = try await URLSessionHTTPTransport().send(
            HTTPTransportRequest(
                method: .init(rawValue: method), url: url, headers: fields, body: body, timeout: .seconds(30),
                maximumResponseBytes: 8 << 20))
        return Reply(status: response.statusCode, headers: response.headers, body: response.body)
    }

    func get(_ path: String, headers: [(String, String)] = []) async throws -> Reply {
        try await send("GET", path, headers: headers)
    }
}
#endif
