#if Hummingbird
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle
import Testing
import UserSessions
import UserSessionsHummingbird
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A Hummingbird application on 127.0.0.1 (a free port), running for `body`, stopped gracefully afterwards.
func withLiveServer<Context: RequestContext, R>(
    _ router: Router<Context>, _ body: (URL) async throws -> R
) async throws -> R where Context.Source == ApplicationRequestContextSource {
    let port = OneShot<Int>()
    let logger = Logger(label: "web-tests", factory: { _ in SwiftLogNoOpLogHandler() })
    let app = Application(
        router: router, configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0)),
        onServerRunning: { channel in port.fulfil(channel.localAddress?.port ?? 0) }, logger: logger)
    let group = ServiceGroup(services: [app], gracefulShutdownSignals: [], logger: logger)
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        let base = try #require(URL(string: "http://127.0.0.1:\(await port.value)"))
        do {
            let result = try await body(base)
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return result
        } catch {
            await group.triggerGracefulShutdown()
            try? await tasks.waitForAll()
            throw error
        }
    }
}

/// A value set once and awaited by anyone.
final class OneShot<Value: Sendable>: Sendable {
    private struct State {
        var value: Value?
        var waiters: [CheckedContinuation<Value, Never>] = []
    }
    private let state = Locked(State())

    func fulfil(_ value: Value) {
        let waiters = state.withLock { state -> [CheckedContinuation<Value, Never>] in
            guard state.value == nil else { return [] }
            state.value = value
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resumeVisibly(returning: value) }
    }

    var value: Value {
        get async {
            await withVisibleCheckedContinuation { continuation in
                let ready = state.withLock { state -> Value? in
                    if let value = state.value { return value }
                    state.waiters.append(continuation)
                    return nil
                }
                if let ready { continuation.resumeVisibly(returning: ready) }
            }
        }
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

    /// The `Set-Cookie` header's parts: the `name=value` pair first, then the attributes.
    var setCookie: [String]? {
        headers["Set-Cookie"].map { $0.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) } }
    }

    /// The cookie value set for `name`, if any.
    func cookieValue(_ name: String) -> String? {
        guard let pair = setCookie?.first, pair.hasPrefix(name + "=") else { return nil }
        return String(pair.dropFirst(name.count + 1))
    }

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

/// A browser stand-in: sends requests with its one cookie and follows nothing.
struct Client {
    let base: URL
    var cookie: String?
    var cookieName = "user_session"
    /// Other cookies the browser holds (the pending sign-in's), sent after the session cookie.
    var otherCookies: [String: String] = [:]

    func send(
        _ method: String, _ path: String, headers: [(String, String)] = [], body: Data? = nil,
        cookie overriding: String?? = nil
    ) async throws -> Reply {
        var fields = HTTPTransportHeaders()
        for (name, value) in headers { fields.add(name: name, value: value) }
        var pairs: [String] = []
        if let cookie = overriding ?? cookie { pairs.append("\(cookieName)=\(cookie)") }
        for name in otherCookies.keys.sorted() { pairs.append("\(name)=\(otherCookies[name] ?? "")") }
        if !pairs.isEmpty { fields.add(name: "Cookie", value: pairs.joined(separator: "; ")) }
        let url = try #require(URL(string: base.absoluteString + path))
        let response = try await URLSessionHTTPTransport().send(
            HTTPTransportRequest(
                method: .init(rawValue: method), url: url, headers: fields, body: body, timeout: .seconds(30),
                maximumResponseBytes: 8 << 20))
        return Reply(status: response.statusCode, headers: response.headers, body: response.body)
    }

    func get(_ path: String, headers: [(String, String)] = [], cookie: String?? = nil) async throws -> Reply {
        try await send("GET", path, headers: headers, cookie: cookie)
    }
}

/// `Tests/UserSessionsOpenIDConnectTests/Fixtures/oidc_provider.py` on 127.0.0.1, for one test.
struct Provider {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appending(path: "UserSessionsOpenIDConnectTests").appending(path: "Fixtures")
    /// The redirect URI the fixture's `web-app` client is registered with.
    static let redirectURI = URL(string: "http://127.0.0.1/callback") ?? URL(fileURLWithPath: "/")

    static let isAvailable = FixtureServer.pythonCanImport("authlib, flask, joserfc")

    let server: FixtureServer
    var issuer: URL { server.baseURL }

    static func with<R>(_ body: (Provider) async throws -> R) async throws -> R {
        try await FixtureServer.run(script: "oidc_provider.py", in: directory, timeout: .seconds(60)) {
            try await body(Provider(server: $0))
        }
    }

    /// The fixture's `web-app` client (redirect URI `http://127.0.0.1/callback`, no refresh tokens).
    static let webApp = OAuth2TokenRefresher.ClientAuthentication.clientSecretBasic(id: "web-app", secret: "web-secret")
    /// The fixture's `example-app` client (any loopback `…/callback`, rotating refresh tokens).
    static let exampleApp = OAuth2TokenRefresher.ClientAuthentication.clientSecretBasic(
        id: "example-app", secret: "example-secret")

    /// An OpenID Connect client of the fixture's `web-app`, or of its `example-app` when `example`.
    func client(
        example: Bool = false, stateStore: any OpenIDConnectStateStore = InMemoryOpenIDConnectStateStore()
    ) throws -> OpenIDConnectClient {
        try OpenIDConnectClient(
            issuer: issuer,
            configuration: OpenIDConnectConfiguration(
                clientAuthentication: example ? Self.exampleApp : Self.webApp,
                redirectURI: example
                    ? URL(string: "http://127.0.0.1:8080/auth/callback") ?? Self.redirectURI : Self.redirectURI,
                scopes: example ? ["openid", "profile", "email", "offline_access"] : ["openid", "profile", "email"]),
            stateStore: stateStore)
    }

    /// The name of the cookie that holds the pending sign-in on loopback HTTP.
    static let signInCookie = "user_session_signin"

    /// A refresher of the fixture's `example-app` at its token endpoint.
    func refresher() throws -> OAuth2TokenRefresher {
        try OAuth2TokenRefresher(tokenEndpoint: server.url("/token"), clientAuthentication: Self.exampleApp)
    }

    /// POSTs `body` as JSON to the control endpoint `path`.
    func control(_ path: String, _ body: [String: Any] = [:]) async throws {
        var request = URLRequest(url: server.url(path))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONSerialization.data(withJSONObject: body)
        let (_, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 200, "the provider answered \(path)")
    }

    /// The provider's counters.
    func stats() async throws -> [String: Any] {
        let (data, _) = try await URLSession.shared.data(from: server.url("/control/stats"))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// Posts the login form for the authorization URL `location` as alice; returns the callback's query.
    func logIn(_ location: String) async throws -> String {
        let url = try #require(URL(string: location))
        let query = try #require(URLComponents(url: url, resolvingAgainstBaseURL: false)?.percentEncodedQuery)
        let response = try await URLSessionHTTPTransport().send(
            HTTPTransportRequest(
                method: .post, url: server.url("/authorize"),
                headers: [("Content-Type", "application/x-www-form-urlencoded")],
                body: Data((query + "&username=alice&password=wonderland").utf8), timeout: .seconds(20),
                maximumResponseBytes: 1 << 20))
        #expect(response.statusCode == 302, "the login form redirects back")
        let callback = try #require(response.headers["Location"].flatMap { URLComponents(string: $0) })
        return callback.percentEncodedQuery ?? ""
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

    /// Signs alice in through the server at `client.base`: login, the provider's form, the callback (with the
    /// pending sign-in's cookie the login set). Returns the callback's reply (its cookie is the new session).
    func signIn(through client: Client, returnTo: String = "/") async throws -> Reply {
        let (query, browser) = try await startSignIn(through: client, returnTo: returnTo)
        return try await browser.get("/auth/callback?" + query)
    }

    /// Starts a sign-in through the server and logs in at the provider, stopping at the redirect back: the
    /// callback's query, and the browser holding the pending sign-in's cookie.
    func startSignIn(through client: Client, returnTo: String = "/") async throws -> (query: String, browser: Client) {
        let encoded = returnTo.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        let login = try await client.get("/auth/login?returnTo=" + encoded)
        #expect(login.status == 302, "login redirects to the provider")
        var browser = client
        let pair = try #require(login.setCookie(named: Self.signInCookie)?.first, "login sets the sign-in cookie")
        browser.otherCookies[Self.signInCookie] = String(pair.dropFirst(Self.signInCookie.count + 1))
        let query = try await logIn(try #require(login.location))
        return (query, browser)
    }
}

/// A refresher whose answers a test scripts: each refresh takes the next outcome (the last one repeats).
final class ScriptedRefresher: TokenRefresher {
    enum Outcome: Sendable {
        case token(String)
        case failure(RefreshFailureClass)
    }

    private let state: Locked<(outcomes: [Outcome], refreshes: Int, revocations: Int)>
    /// The DPoP proofs of sessions bound to a key (``TokenRefresher/dpop``).
    let dpop: DPoPProofs?

    init(_ outcomes: [Outcome], dpop: DPoPProofs? = nil) {
        state = Locked((outcomes, 0, 0))
        self.dpop = dpop
    }

    var refreshes: Int { state.withLock { $0.refreshes } }
    var revocations: Int { state.withLock { $0.revocations } }

    func refresh(_ credentials: Credentials) async throws -> Credentials {
        let outcome = state.withLock { state -> Outcome? in
            state.refreshes += 1
            return state.outcomes.count > 1 ? state.outcomes.removeFirst() : state.outcomes.first
        }
        switch outcome {
        case .token(let token)?:
            return Credentials(
                accessToken: token, refreshToken: "refresh-" + token, expiresAt: Date().addingTimeInterval(3600),
                source: .refresh)
        case .failure(let failureClass)?:
            throw UserSessionError(.refreshFailed, "scripted \(failureClass) failure", failureClass: failureClass)
        case nil:
            throw UserSessionError(.refreshFailed, "no outcome scripted", failureClass: .terminal)
        }
    }

    var canRevoke: Bool { true }

    func revoke(_ credentials: Credentials) async throws {
        state.withLock { $0.revocations += 1 }
    }
}

/// A clock a test moves by hand.
final class ManualClock: Sendable {
    private let time = Locked(Date(timeIntervalSince1970: 1_800_000_000))
    var now: Date { time.withLock { $0 } }
    func advance(_ seconds: TimeInterval) { time.withLock { $0 = $0.addingTimeInterval(seconds) } }
    var sessionClock: SessionClock { SessionClock.custom { [self] in now } }
}

/// A temporary directory removed after `body`.
func withTemporaryDirectory<R>(_ body: (URL) async throws -> R) async throws -> R {
    let directory = FileManager.default.temporaryDirectory.appending(path: "web-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: directory) }
    return try await body(directory)
}

/// The prototype of a session opened without a provider: alice with `token` (expired when `expired`).
func alice(token: String = "token-1", expired: Bool = false) -> UserSessionPrototype {
    UserSessionPrototype(
        identifier: "alice", userInfo: UserInfo(id: "248289761001", email: "alice@example.com", name: "Alice Liddell"),
        credentials: Credentials(
            accessToken: token, refreshToken: "refresh-" + token,
            expiresAt: expired ? Date(timeIntervalSinceNow: -60) : Date(timeIntervalSinceNow: 3600)))
}
#endif
