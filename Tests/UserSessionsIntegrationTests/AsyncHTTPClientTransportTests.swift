#if AsyncHTTPClient
import AsyncHTTPClient
import Foundation
import Testing
import UserSessions
import UserSessionsAsyncHTTPClient
import UserSessionsTestSupport

extension TransportUnderTest {
    /// `AsyncHTTPClientTransport` over a client made with the recommended configuration.
    static let asyncHTTPClient = makeAsyncHTTPClient(
        "AsyncHTTPClient", AsyncHTTPClientTransport.recommendedConfiguration)

    /// `AsyncHTTPClientTransport` over a client left at AsyncHTTPClient's defaults, which follow redirects.
    static let asyncHTTPClientFollowingRedirects = makeAsyncHTTPClient(
        "AsyncHTTPClient with a client that follows redirects", HTTPClient.Configuration())

    /// Each check gets its own client, shut down afterwards by the test: the transport never shuts it down.
    static func makeAsyncHTTPClient(_ name: String, _ configuration: HTTPClient.Configuration) -> TransportUnderTest {
        TransportUnderTest(name) { body in
            let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
            do {
                try await body(AsyncHTTPClientTransport(client: client))
            } catch {
                try await client.shutdown()
                throw error
            }
            try await client.shutdown()
        }
    }
}

/// The AsyncHTTPClient transport passes the same suite as the URLSession one (`URLSessionTransportTests`), against
/// the same fixture: same classification, same 1 MiB cap, redirects refused, same timeouts.
struct AsyncHTTPClientTransportTests {
    @Test(arguments: TransportCheck.allCases)
    func theSharedTransportSuite(_ check: TransportCheck) async throws {
        try await check.run(on: .asyncHTTPClient)
    }

    /// A client that follows redirects (AsyncHTTPClient's default) is still refused every redirect, and never takes
    /// a secret to another host: 307 and 308 are not followed at all (the body is a single-pass stream), and for
    /// 301, 302 and 303, which AsyncHTTPClient turns into a body-less GET without `Authorization` for another host,
    /// the transport reports the first 3xx, which the refresher refuses.
    @Test(arguments: [307, 308, 301, 302, 303])
    func aClientThatFollowsRedirectsStillNeverLeaksASecret(status: Int) async throws {
        try await TransportUnderTest.asyncHTTPClientFollowingRedirects.with { transport in
            try await OAuthFixtureServer.with { server in
                try await server.configure(["mode": "redirect_other_host", "redirect_status": status])
                let refresher = try TransportCheck.refresher(server, transport)
                let (refreshToken, _) = try await server.issue()
                let error = try await TransportCheck.refreshError(refresher, refreshToken, "\(status)")
                #expect(error.code == .refreshFailed && error.failureClass == .transient, "\(error)")
                let stats = try await server.stats()
                #expect(stats.redirectTargetSawSecret == 0)
                if status >= 307 { #expect(stats.redirectTargetHits == 0) }
                #expect(!"\(error)".contains(refreshToken))
            }
        }
    }

    /// The transport leaves the client to its owner: a client outlives the transports made over it.
    @Test func theClientStaysUsableAfterTheTransportIsGone() async throws {
        let client = HTTPClient(
            eventLoopGroup: HTTPClient.defaultEventLoopGroup,
            configuration: AsyncHTTPClientTransport.recommendedConfiguration)
        do {
            try await OAuthFixtureServer.with { server in
                for _ in 0..<2 {
                    let refresher = try TransportCheck.refresher(server, AsyncHTTPClientTransport(client: client))
                    let (refreshToken, _) = try await server.issue()
                    let refreshed = try await refresher.refresh(TransportCheck.credentials(refreshToken))
                    #expect(refreshed.refreshToken != refreshToken)
                }
                #expect(try await server.stats().refreshes == 2)
            }
        } catch {
            try await client.shutdown()
            throw error
        }
        try await client.shutdown()
    }
}
#endif
