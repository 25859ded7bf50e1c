import Foundation
import Testing

@testable import UserSessions

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A transport that hands every request to another one, after letting the test change it, and records what it saw.
private final class RecordingTransport: HTTPTransport {
    private let inner: any HTTPTransport
    private let adjust: @Sendable (inout HTTPTransportRequest) -> Void
    private let seen = Locked<[HTTPTransportRequest]>([])

    init(
        _ inner: any HTTPTransport = URLSessionHTTPTransport(),
        adjust: @escaping @Sendable (inout HTTPTransportRequest) -> Void = { _ in }
    ) {
        self.inner = inner
        self.adjust = adjust
    }

    var requests: [HTTPTransportRequest] { seen.withLock { $0 } }

    func send(_ request: HTTPTransportRequest) async throws -> HTTPTransportResponse {
        seen.withLock { $0.append(request) }
        var request = request
        adjust(&request)
        return try await inner.send(request)
    }
}

/// A transport that answers every request with one canned response, without any network.
private struct CannedTransport: HTTPTransport {
    var response: HTTPTransportResponse

    func send(_ request: HTTPTransportRequest) async throws -> HTTPTransportResponse { response }
}

/// The shared HTTP layer (`GuardedHTTPClient`) and the default transport against the fixture token cache on
/// 127.0.0.1: the 1 MiB cap, redirect refusal, timeouts, HTTPS-or-loopback, and both clients on one transport.
struct HTTPLayerTests {
    static let limit = GuardedHTTPClient.maximumResponseBytes

    static func exchangeFailure(_ body: () async throws -> Void) async -> HTTPExchangeFailure? {
        do {
            try await body()
            Issue.record("the exchange should have failed")
            return nil
        } catch let failure as HTTPExchangeFailure {
            return failure
        } catch {
            Issue.record("unexpected error \(error)")
            return nil
        }
    }

    static func client(_ transport: (any HTTPTransport)? = nil) -> GuardedHTTPClient {
        GuardedHTTPClient(transport: transport, endpointName: "the fixture")
    }

    @Test func bodiesUpToOneMiBAreReadAndLongerOnesAreCutOff() async throws {
        try await withTokenCache { cache in
            let client = Self.client()
            let exact = try await client.send(
                .get, cache.server.url("/__huge").appending(queryItems: [.init(name: "bytes", value: "\(Self.limit)")]),
                headers: [], timeout: .seconds(30))
            #expect(exact.body.count == Self.limit)
            let huge = cache.server.url("/__huge").appending(queryItems: [.init(name: "bytes", value: "52428800")])
            let failure = await Self.exchangeFailure {
                _ = try await client.send(.get, huge, headers: [], timeout: .seconds(30))
            }
            #expect(failure?.kind == .responseTooLarge)
            // The default transport reports it in the protocol's terms.
            let request = HTTPTransportRequest(method: .get, url: huge, timeout: .seconds(30), maximumResponseBytes: 10)
            await #expect(throws: HTTPTransportError(.responseTooLarge)) {
                try await URLSessionHTTPTransport().send(request)
            }
        }
    }

    @Test func theRemoteStoreNowHasTheCapToo() async throws {
        try await withTokenCache { cache in
            // A valid answer meaning "nothing stored", padded past 1 MiB: read whole before, refused now.
            let padding = String(repeating: "a", count: Self.limit)
            var request = URLRequest(url: cache.server.url("/__canned"))
            request.httpMethod = "POST"
            request.httpBody = Data(#"{"status": "true", "token_info": "{}", "padding": "\#(padding)"}"#.utf8)
            _ = try await URLSession.shared.data(for: request)
            try await cache.setMode("canned")
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            let error = await #expect(throws: UserSessionError.self) { try await store.load(identifier: "u") }
            #expect(error?.code == .transportFailure)
            #expect(error?.message.contains("larger than") == true)
        }
    }

    @Test func redirectsAreReturnedByTheTransportAndRefusedByTheLayer() async throws {
        try await withTokenCache { cache in
            let url = cache.server.url("/__redirect")
            let response = try await URLSessionHTTPTransport().send(
                HTTPTransportRequest(method: .post, url: url, timeout: .seconds(30), maximumResponseBytes: Self.limit))
            #expect(response.statusCode == 307)
            #expect(response.headers["location"]?.hasSuffix("/__redirected") == true)
            let failure = await Self.exchangeFailure {
                _ = try await Self.client().send(.post, url, headers: [], body: Data("x".utf8), timeout: .seconds(30))
            }
            #expect(failure?.kind == .redirected)
            #expect(try await cache.lastRequest()["redirected"] == "false")
            // A transport that followed a redirect anyway and returned its 3xx is still refused.
            let canned = CannedTransport(response: HTTPTransportResponse(statusCode: 302))
            let cannedFailure = await Self.exchangeFailure {
                _ = try await Self.client(canned).send(.get, url, headers: [], timeout: .seconds(30))
            }
            #expect(cannedFailure?.kind == .redirected)
        }
    }

    @Test func aHangingServerTimesOutInTheTransportAndInTheLayer() async throws {
        try await withTokenCache { cache in
            let url = cache.server.url("/__hang")
            await #expect(throws: HTTPTransportError(.timedOut)) {
                try await URLSessionHTTPTransport().send(
                    HTTPTransportRequest(
                        method: .get, url: url, timeout: .milliseconds(200), maximumResponseBytes: Self.limit))
            }
            // A transport that ignores the request's timeout is ended by the layer's own deadline, which runs on a
            // manual clock here: it passes when the test advances the clock, not after real time.
            let ignoring = RecordingTransport { $0.timeout = .seconds(3600) }
            let time = ManualTime()
            let layer = GuardedHTTPClient(
                transport: ignoring, endpointName: "the fixture", deadlineClock: time.deadlineClock)
            let sending = Task {
                await Self.exchangeFailure { _ = try await layer.send(.get, url, headers: [], timeout: .seconds(20)) }
            }
            try await withHangGuard("the layer's deadline") { await time.sleeps.wait(for: 1) }
            time.advance(by: 20)
            #expect(await sending.value?.kind == .timedOut)
            #expect(ignoring.requests.first?.timeout == .seconds(20))
            try await cache.get("/__release")
            // Released, the same endpoint answers within the deadline.
            let response = try await Self.client().send(.get, url, headers: [], timeout: .seconds(30))
            #expect(response.statusCode == 200)
        }
    }

    @Test func cancellingTheCallerCancelsTheRequest() async throws {
        try await withTokenCache { cache in
            let url = cache.server.url("/__hang")
            let task = Task { try await Self.client().send(.get, url, headers: [], timeout: .seconds(3600)) }
            task.cancel()
            let failure = await Self.exchangeFailure { _ = try await task.value }
            #expect(failure?.kind == .cancelled)
        }
    }

    @Test func onlyHTTPSOrLoopbackLeavesTheClient() async throws {
        let recording = RecordingTransport(CannedTransport(response: HTTPTransportResponse(statusCode: 200)))
        for string in ["http://example.com/x", "http://127.0.0.1.example.com/x", "ftp://127.0.0.1/x"] {
            let url = try #require(URL(string: string))
            await #expect(throws: UserSessionError(.insecureEndpoint, "")) {
                try await Self.client(recording).send(.get, url, headers: [], timeout: .seconds(1))
            }
        }
        #expect(recording.requests.isEmpty)
        _ = try await Self.client(recording).send(
            .get, try #require(URL(string: "https://example.com/x")), headers: [], timeout: .seconds(1))
        #expect(recording.requests.count == 1)
    }

    @Test func aTransportThatIgnoresTheCapStillCannotPassALargerBody() async throws {
        let canned = CannedTransport(
            response: HTTPTransportResponse(statusCode: 200, body: Data(count: Self.limit + 1)))
        let url = try #require(URL(string: "https://example.com/x"))
        let failure = await Self.exchangeFailure {
            _ = try await Self.client(canned).send(.get, url, headers: [], timeout: .seconds(1))
        }
        #expect(failure?.kind == .responseTooLarge)
        let refresher = try OAuth2TokenRefresher(
            tokenEndpoint: url, clientAuthentication: .publicClient(id: "c"), transport: canned)
        let error = await OAuth2TokenRefresherTests.refreshError {
            try await refresher.refresh(OAuth2TokenRefresherTests.credentials("rt"))
        }
        #expect(error?.code == .malformedTokenResponse)
        #expect(error?.failureClass == .transient)
    }

    @Test func theRefresherAndTheStoreShareOneCustomTransport() async throws {
        try await withTokenCache { cache in
            try await OAuthFixtureServer.with { server in
                let transport = RecordingTransport()
                let refresher = try OAuth2TokenRefresher(
                    tokenEndpoint: server.tokenEndpoint,
                    clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"),
                    requestTimeout: .seconds(20), transport: transport)
                let store = try RemoteTokenStore(endpoint: cache.endpoint, transport: transport)
                let (refreshToken, _) = try await server.issue()
                let refreshed = try await refresher.refresh(OAuth2TokenRefresherTests.credentials(refreshToken))
                try await store.save(
                    StoredSession(userInfo: UserInfo(id: "u"), credentials: refreshed), identifier: "u")
                #expect(try await store.load(identifier: "u")?.credentials?.refreshToken == refreshed.refreshToken)
                let requests = transport.requests
                #expect(requests.map(\.method) == [.post, .post, .get])
                #expect(requests.allSatisfy { $0.maximumResponseBytes == Self.limit })
                #expect(requests.first?.timeout == .seconds(20))
                #expect(requests.last?.timeout == .seconds(10))
                #expect(requests.first?.headers["content-type"] == "application/x-www-form-urlencoded")
                #expect(requests.first?.headers["AUTHORIZATION"]?.hasPrefix("Basic ") == true)
            }
        }
    }

    @Test func headersKeepTheirOrderAndAreLookedUpIgnoringCase() {
        var headers: HTTPTransportHeaders = [("Accept", "a"), ("X-Two", "1"), ("x-two", "2")]
        #expect(headers["ACCEPT"] == "a")
        #expect(headers.values(for: "X-TWO") == ["1", "2"])
        headers.replaceOrAdd(name: "x-Two", value: "3")
        #expect(headers.map(\.name) == ["Accept", "x-Two"])
        #expect(headers["x-two"] == "3")
        headers.add(name: "Accept", value: "b")
        #expect(headers.values(for: "accept") == ["a", "b"])
        #expect(headers["missing"] == nil)
    }

    @Test func theTokenResponseReadingIsPublic() throws {
        let previous = Credentials(accessToken: "at-0", refreshToken: "rt-0", grantedPermissions: ["read"])
        let sentAt = Date(timeIntervalSince1970: 1_800_000_000)
        let body = Data(#"{"access_token": "at-1", "token_type": "Bearer", "expires_in": 60}"#.utf8)
        let refreshed = try OAuth2TokenRefresher.credentials(
            fromTokenResponse: HTTPTransportResponse(statusCode: 200, body: body), refreshing: previous, sentAt: sentAt)
        #expect(refreshed.accessToken == "at-1")
        #expect(refreshed.refreshToken == "rt-0")
        #expect(refreshed.expiresAt == sentAt.addingTimeInterval(60))
        let cases: [(Int, String, RefreshFailureClass)] = [
            (400, #"{"error": "invalid_grant", "error_description": "rt-0 is spent"}"#, .terminal),
            (401, #"{"error": "invalid_client"}"#, .misconfiguration),
            (503, "", .transient), (429, "", .transient), (307, "", .transient),
            (400, #"{"error": "invalid_grant", "error": "x"}"#, .misconfiguration),
        ]
        for (status, text, expected) in cases {
            let error = #expect(throws: UserSessionError.self) {
                try OAuth2TokenRefresher.credentials(
                    fromTokenResponse: HTTPTransportResponse(statusCode: status, body: Data(text.utf8)),
                    refreshing: previous, sentAt: sentAt)
            }
            #expect(error?.failureClass == expected, "\(status) \(text)")
            #expect(error.map { "\($0)".contains("rt-0") } == false)
        }
    }
}
