#if Logging && Metrics
import CoreMetrics
import InMemoryLogging
import Logging
import MetricsTestKit
import Testing
import UserSessions
import UserSessionsLogging
import UserSessionsMetrics
import UserSessionsTestSupport

/// A `ClientCredentialsTokenManager` against the OAuth fixture, watched by the swift-log and swift-metrics observers:
/// every outcome logged at its level and counted with bounded dimensions, never a token or the secret.
struct ClientTokenObservationTests {
    static let secret = "observed-secret"

    @Test func tokenRequestsAreLoggedAndCountedWithoutSecrets() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            var handler = InMemoryLogHandler()
            handler.logLevel = .trace
            let logger = Logger(label: "client-tokens", factory: { _ in handler })
            let metrics = TestMetrics()
            let observers: [any UserSessionObserver] = [
                UserSessionLogObserver(logger: logger), UserSessionMetrics(factory: metrics),
            ]
            let tokens = try ClientCredentialsTokenManager(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: Self.secret),
                configuration: .init(observers: observers))
            let token = try await tokens.accessToken(for: .init(scopes: ["orders.read"]))
            _ = try? await tokens.accessToken(for: .init(scopes: ["forbidden"]))
            let rejected = try ClientCredentialsTokenManager(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: "wrong-secret"),
                configuration: .init(observers: observers))
            _ = try? await rejected.accessToken(for: .init(scopes: ["orders.read"]))

            func requests(_ dimensions: [(String, String)]) -> Int64 {
                metrics.counterTotal(label: "user_sessions_client_token_requests_total", dimensions: dimensions)
            }
            #expect(requests([("outcome", "issued")]) == 1)
            #expect(requests([("outcome", "failed"), ("failure_class", "misconfiguration")]) == 1)
            #expect(requests([("outcome", "rejected")]) == 1)
            #expect(
                try metrics.expectTimer("user_sessions_client_token_request_duration", [("outcome", "issued")])
                    .values.count == 1)

            let lines = handler.entries.filter { $0.metadata["client_token.event"] != nil }
            #expect(lines.map(\.level) == [.debug, .error, .error])
            #expect(
                lines.map { $0.metadata["client_token.event"] } == [
                    "tokenIssued", "requestFailed(misconfiguration)", "clientRejected",
                ])
            #expect(lines.allSatisfy { $0.metadata["client_token.client_id"] == "client" })
            #expect(lines.first?.metadata["client_token.scopes"] == "orders.read")
            for line in handler.entries {
                let text = "\(line.message) \(line.metadata)"
                #expect(!text.contains(token))
                #expect(!text.contains(Self.secret))
                #expect(!text.contains("wrong-secret"))
            }
        }
    }
}
#endif
