#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `Fixtures/oidc_provider.py` (an OpenID Connect provider on Authlib) on 127.0.0.1, started for one test.
final class OpenIDProviderFixture: Sendable {
    /// The folder of the provider's script.
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appending(path: "Fixtures")
    /// The redirect URI every client of the provider is registered with.
    static let redirectURI = URL(string: "http://127.0.0.1/callback") ?? URL(fileURLWithPath: "/")
    /// The post-logout redirect URI the provider accepts.
    static let postLogoutRedirectURI = URL(string: "http://127.0.0.1/signed-out") ?? URL(fileURLWithPath: "/")

    /// Whether python3 can import what the provider needs (Authlib, Flask, joserfc).
    static let isAvailable = FixtureServer.pythonCanImport("authlib, flask, joserfc")

    /// Whether the provider must run here: in CI (`CI=true`) or with `USER_SESSIONS_REQUIRE_OIDC=1`.
    static var isRequired: Bool {
        let environment = ProcessInfo.processInfo.environment
        return environment["CI"] == "true" || environment["USER_SESSIONS_REQUIRE_OIDC"] == "1"
    }

    let server: FixtureServer

    private init(_ server: FixtureServer) { self.server = server }

    /// The issuer: `http://127.0.0.1:<port>`.
    var issuer: URL { server.baseURL }

    /// At most two providers run at once: each is a python process that imports Authlib and Flask and makes keys,
    /// and fifty of them starting together would starve the rest of the suite of the machine's cores.
    static let slots = Slots(2)

    /// Runs `body` with a fresh provider and stops it afterwards.
    static func with<R>(_ body: (OpenIDProviderFixture) async throws -> R) async throws -> R {
        await slots.acquire()
        defer { slots.release() }
        return try await FixtureServer.run(script: "oidc_provider.py", in: directory, timeout: .seconds(60)) {
            try await body(OpenIDProviderFixture($0))
        }
    }

    /// A client of this provider with the given authentication (default: the basic-authenticated `web-app`).
    func client(
        _ authentication: OAuth2TokenRefresher.ClientAuthentication = .clientSecretBasic(
            id: "web-app", secret: "web-secret"),
        stateStore: any OpenIDConnectStateStore = InMemoryOpenIDConnectStateStore(),
        clock: SessionClock = .system,
        transport: (any HTTPTransport)? = nil,
        configure: (inout OpenIDConnectConfiguration) -> Void = { _ in }
    ) throws -> OpenIDConnectClient {
        var configuration = OpenIDConnectConfiguration(
            clientAuthentication: authentication, redirectURI: Self.redirectURI)
        configure(&configuration)
        return try OpenIDConnectClient(
            issuer: issuer, configuration: configuration, stateStore: stateStore, transport: transport, clock: clock)
    }

    /// Posts the provider's login form for the authorization URL `url` as `user` and returns the query of the
    /// callback the browser would be redirected to (the provider's 302 is not followed).
    func logIn(_ url: URL, user: String = "alice", password: String = "wonderland") async throws -> String {
        let query = try #require(URLComponents(url: url, resolvingAgainstBaseURL: false)?.percentEncodedQuery)
        let body = query + "&username=\(user)&password=\(password)"
        let response = try await URLSessionHTTPTransport().send(
            HTTPTransportRequest(
                method: .post, url: server.url("/authorize"),
                headers: [("Content-Type", "application/x-www-form-urlencoded")], body: Data(body.utf8),
                timeout: .seconds(20), maximumResponseBytes: 1 << 20))
        #expect(response.statusCode == 302, "the login form redirects back")
        let location = try #require(response.headers["Location"], "the provider answered with a Location")
        let components = try #require(URLComponents(string: location))
        #expect(components.host == "127.0.0.1" && components.path.hasSuffix("/callback"))
        return components.percentEncodedQuery ?? ""
    }

    /// Starts a sign-in with `client` and logs in: the callback's query, and the sealed pending sign-in the
    /// browser that started it keeps.
    func callback(for client: OpenIDConnectClient, options: AuthorizationOptions = AuthorizationOptions())
        async throws -> Callback
    {
        let redirect = try await client.authorizationRedirect(options)
        return Callback(query: try await logIn(redirect.url), sealed: redirect.sealedPendingSignIn)
    }

    /// Asks the provider to misbehave on its next answers, for example `["id_token": "alg_none"]`.
    func misbehave(_ faults: [String: Any]) async throws {
        _ = try await control("/control/misbehave", faults)
    }

    /// Makes the provider sign later tokens with `algorithm`.
    func signWith(_ algorithm: String) async throws {
        _ = try await control("/control/sign-with", ["alg": algorithm])
    }

    /// Replaces the provider's keys with new ones (new kids).
    func rotateKeys() async throws {
        _ = try await control("/control/rotate", [:])
    }

    /// A back-channel logout token minted by the provider.
    func logoutToken(_ claims: [String: Any]) async throws -> String {
        let answer = try await control("/control/logout-token", claims)
        return try #require(answer["logout_token"] as? String)
    }

    /// Makes the provider mint a back-channel logout token with `claims` (as ``logoutToken(_:)``) and POST it,
    /// form-encoded, to `uri`; returns the HTTP status the receiver answered (502 when it could not be reached).
    func sendLogout(_ claims: [String: Any], to uri: URL) async throws -> Int {
        var body = claims
        body["uri"] = uri.absoluteString
        let answer = try await control("/control/send-logout", body)
        return try #require(answer["status"] as? Int)
    }

    /// Makes `client` authenticate with private_key_jwt from now on, with a new key made by the provider for
    /// `algorithm`; the assertions' `aud` must be the issuer (`"issuer"`) or the endpoint's URL (`"endpoint"`).
    /// Returns a signer with the private key.
    func usePrivateKeyJWT(
        for client: String, algorithm: PrivateKeyJWTSigner.Algorithm = .es256, audience: String = "issuer"
    ) async throws -> PrivateKeyJWTSigner {
        let answer = try await control(
            "/control/client-key", ["client": client, "alg": algorithm.name, "audience": audience])
        return try PrivateKeyJWTSigner(
            pem: try #require(answer["pem"] as? String), algorithm: algorithm,
            keyID: try #require(answer["kid"] as? String))
    }

    /// Switches the provider's pushed authorization request endpoint on (and makes it mandatory when `required`).
    func pushedAuthorizationRequests(required: Bool) async throws {
        _ = try await control("/control/par", ["enabled": true, "required": required])
    }

    /// The parameters of every authorization request pushed so far.
    func pushedRequests() async throws -> [[String: String]] {
        let (data, _) = try await URLSession.shared.data(from: server.url("/control/par-requests"))
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        return try #require(object["requests"] as? [[String: String]])
    }

    /// The provider's counters (`jwks_requests`, `token_requests`, `token_errors`, `last_auth`, `logouts`, …).
    func stats() async throws -> [String: Any] {
        let (data, _) = try await URLSession.shared.data(from: server.url("/control/stats"))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// One counter of ``stats()``.
    func count(_ name: String) async throws -> Int {
        try await stats()[name] as? Int ?? -1
    }

    /// POSTs `body` as JSON to the control endpoint `path`, expects the status `expected`, returns the JSON answer.
    func control(_ path: String, _ body: [String: Any], expecting expected: Int = 200) async throws -> [String: Any] {
        var request = URLRequest(url: server.url(path))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONSerialization.data(withJSONObject: body)
        let (data, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == expected, "the provider answered \(path)")
        return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
    }
}

/// What a browser brings to the callback: the callback URL's query and its cookie (the sealed pending sign-in).
struct Callback: Sendable {
    var query: String
    var sealed: String?

    /// The same callback with the query's parameters rewritten by `change` (`name=value` pairs, still encoded).
    func rewritingQuery(_ change: ([String]) -> [String]) -> Callback {
        Callback(query: change(query.split(separator: "&").map(String.init)).joined(separator: "&"), sealed: sealed)
    }
}

extension OpenIDConnectClient {
    /// Completes the sign-in of `callback`, as the browser that brought it.
    func completeSignIn(_ callback: Callback) async throws(OpenIDConnectError) -> OpenIDSignIn {
        try await completeSignIn(callbackQuery: callback.query, sealedPendingSignIn: callback.sealed)
    }
}

/// The pending-sign-in keys every instance of a test fleet shares.
enum FleetKeys {
    /// 32 fixed bytes (a test key, never a real one).
    static let keys = make(0x5A)

    /// Keys of 32 bytes `current` each, opening those of 32 bytes `previous` too.
    static func make(_ current: UInt8, previous: [UInt8] = []) -> PendingSignInKeys {
        do {
            return try PendingSignInKeys(
                current: Data(repeating: current, count: 32), previous: previous.map { Data(repeating: $0, count: 32) })
        } catch {
            preconditionFailure("32 bytes are a valid key")
        }
    }

    /// The shared keys, with pending sign-ins kept in the state store too.
    static func inStateStore(_ configuration: inout OpenIDConnectConfiguration) {
        configuration.pendingSignInKeys = keys
        configuration.pendingSignInStorage = .stateStore
    }

    /// The shared keys, with pending sign-ins kept only in the browser.
    static func inBrowser(_ configuration: inout OpenIDConnectConfiguration) {
        configuration.pendingSignInKeys = keys
    }
}

/// A counting semaphore for tests: `acquire()` waits (without a thread) until one of `count` slots is free.
final class Slots: Sendable {
    private struct State {
        var free: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state: Locked<State>

    init(_ count: Int) { state = Locked(State(free: count)) }

    func acquire() async {
        await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = state.withLock { state -> Bool in
                guard state.free > 0 else {
                    state.waiters.append(continuation)
                    return false
                }
                state.free -= 1
                return true
            }
            if granted { continuation.resumeVisibly() }
        }
    }

    func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiters.isEmpty else {
                state.free += 1
                return nil
            }
            return state.waiters.removeFirst()
        }
        next?.resumeVisibly()
    }
}

/// A registry over a fresh file store in a temporary directory, for `body`.
func withRegistry<R>(_ body: (UserSessionRegistry) async throws -> R) async throws -> R {
    let directory = FileManager.default.temporaryDirectory.appending(path: "oidc-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: directory) }
    let registry = UserSessionRegistry(store: FileTokenStore(directory: directory))
    do {
        let result = try await body(registry)
        await registry.shutdown()
        return result
    } catch {
        await registry.shutdown()
        throw error
    }
}

/// Expects `body` to fail with an ``OpenIDConnectError`` of `code`, and returns it.
@discardableResult
func expectRefusal(
    _ code: OpenIDConnectError.Code, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async -> OpenIDConnectError? {
    do {
        try await body()
        Issue.record("expected \(code), but it succeeded", sourceLocation: sourceLocation)
        return nil
    } catch let error as OpenIDConnectError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}
#endif
