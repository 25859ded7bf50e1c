import Testing
import UserSessions
import UserSessionsTestSupport

/// The shared transport suite (``TransportCheck``) over the default transport, `URLSessionHTTPTransport`. The
/// AsyncHTTPClient transport runs the same cases in UserSessionsIntegrationTests when its trait is on.
struct URLSessionTransportTests {
    @Test(arguments: TransportCheck.allCases)
    func theSharedTransportSuite(_ check: TransportCheck) async throws {
        try await check.run(on: .urlSession)
    }
}

/// `URLSessionHTTPTransport(maximumConnectionsPerHost:)`: the limit reaches the session. The provider fixture holds
/// every token request, so the requests that reached it are exactly those `URLSession` let through at once.
struct URLSessionConnectionLimitTests {
    /// Polls the fixture until `held` token requests wait there, at most `polls` times (each poll is a request of
    /// its own, no sleep), and returns the last count.
    private static func waitForHeld(_ held: Int, on server: OAuthFixtureServer, polls: Int = 5_000) async throws -> Int
    {
        var seen = 0
        for _ in 0..<polls {
            seen = try await server.stats().heldRequests
            if seen >= held { return seen }
        }
        return seen
    }

    /// Starts `count` refreshes through `transport` and returns their tasks.
    ///
    /// Their deadline is far away: the fixture holds them on purpose while the test polls, and a deadline that passed
    /// under the load of the whole suite would free a connection (letting a queued request through) and fail the
    /// refresh, which is what made these tests flaky with the refresher's usual 30 s.
    private static func refreshes(
        _ count: Int, through transport: URLSessionHTTPTransport, on server: OAuthFixtureServer
    ) async throws -> [Task<Bool, Never>] {
        let refresher = try TransportCheck.refresher(server, transport, timeout: .seconds(600))
        var tasks: [Task<Bool, Never>] = []
        for family in try await server.issue(count: count) {
            tasks.append(
                Task { (try? await refresher.refresh(TransportCheck.credentials(family.refreshToken))) != nil })
        }
        return tasks
    }

    @Test func aLimitAboveURLSessionsDefaultLetsThatManyRequestsThroughAtOnce() async throws {
        try await OAuthFixtureServer.with { server in
            try await server.hold()
            let transport = URLSessionHTTPTransport(maximumConnectionsPerHost: 9)
            #expect(transport.maximumConnectionsPerHost == 9)
            let tasks = try await Self.refreshes(9, through: transport, on: server)
            // With URLSession's default (6) the seventh request would wait for a connection and never arrive.
            let held = try await Self.waitForHeld(9, on: server)
            try await server.release()
            #expect(held == 9)
            for task in tasks { #expect(await task.value) }
        }
    }

    @Test func aLimitOfTwoKeepsTheThirdRequestWaitingUntilAConnectionIsFree() async throws {
        try await OAuthFixtureServer.with { server in
            try await server.hold()
            let transport = URLSessionHTTPTransport(maximumConnectionsPerHost: 2)
            let tasks = try await Self.refreshes(4, through: transport, on: server)
            #expect(try await Self.waitForHeld(2, on: server) == 2)
            // Many round trips later the other two still wait in the session, not at the provider.
            #expect(try await Self.waitForHeld(3, on: server, polls: 200) == 2)
            try await server.release()
            for task in tasks { #expect(await task.value) }
            #expect(try await server.stats().refreshes == 4)
        }
    }

    @Test func aLimitBelowOneCountsAsOne() {
        #expect(URLSessionHTTPTransport(maximumConnectionsPerHost: 0).maximumConnectionsPerHost == 1)
        #expect(
            URLSessionHTTPTransport().maximumConnectionsPerHost
                == URLSessionHTTPTransport.defaultMaximumConnectionsPerHost)
    }
}
