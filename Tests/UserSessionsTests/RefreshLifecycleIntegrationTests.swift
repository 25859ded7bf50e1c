import Foundation
import Testing

@testable import UserSessions

/// A terminal refresh failure ends the session: `.invalid`, services stopped, an event saying why.
///
/// Needs the lifecycle controller (issue 2), which installs the gate's terminal-failure handler.
struct RefreshLifecycleIntegrationTests {
    final class RecordingService: UserSessionService {
        let stops = ArrivalCounter()
        var name: String { "recording" }
        func start(session: UserSession) async throws {}
        func stop(session: UserSession) async { stops.arrive() }
    }

    @Test func revokedRefreshTokenInvalidatesTheSessionAndStopsItsServices() async throws {
        try await OAuthFixtureServer.with(["--auth", "post", "--client-secret", "secret"]) { server in
            let time = ManualTime()
            let service = RecordingService()
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretPost(id: "client", secret: "secret"),
                clock: time.clock)
            let controller = UserSessionController(
                store: InMemoryTokenStore(), refresher: refresher, services: [service],
                configuration: .init(clock: time.clock))
            let (refreshToken, accessToken) = try await server.issue()
            _ = try await controller.open(
                UserSessionPrototype(
                    userInfo: UserInfo(id: "bob"),
                    credentials: Credentials(
                        accessToken: accessToken, refreshToken: refreshToken,
                        expiresAt: time.now.addingTimeInterval(3600))))
            let events = controller.events(bufferSize: 1_000)
            try await server.revokeAll()
            time.advance(by: 3601)
            let error = await #expect(throws: UserSessionError.self) { try await controller.accessToken() }
            #expect(error?.failureClass == .terminal)
            // Bounded so that a controller without the handler fails this test instead of hanging it.
            let invalidated = await Self.firstEvent(in: events, within: .seconds(20)) {
                $0.kind == .invalidated(.credentialsRevoked)
            }
            #expect(invalidated?.session.state == .invalid)
            #expect(controller.session.state == .invalid)
            #expect(service.stops.count == 1)
            await #expect(throws: UserSessionError.self) { try await controller.accessToken() }
        }
    }

    static func firstEvent(
        in events: AsyncStream<UserSessionEvent>, within limit: Duration,
        where predicate: @escaping @Sendable (UserSessionEvent) -> Bool
    ) async -> UserSessionEvent? {
        // `nil` when the deadline passes first (the stream's iteration is cancelled then).
        try? await Deadline.run(within: limit, timedOut: { CancellationError() }) {
            for await event in events where predicate(event) { return event }
            return nil
        }
    }
}
