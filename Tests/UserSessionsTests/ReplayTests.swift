import Foundation
import Testing

@testable import UserSessions

/// `withAccessToken(isAuthenticationFailure:_:)`: refresh once on an authentication failure and replay once.
struct ReplayTests {
    struct Unauthorized: Error {}
    struct Unrelated: Error {}

    static func isUnauthorized(_ error: any Error) -> Bool { error is Unauthorized }

    /// A controller whose session holds `at-0` / `rt-0`, valid for an hour.
    static func makeController(
        _ refresher: ScriptedRefresher? = nil
    ) async throws -> (UserSessionController, ScriptedRefresher, ManualTime) {
        let time = ManualTime()
        let refresher = refresher ?? ScriptedRefresher(now: { time.now })
        let controller = UserSessionController(
            store: InMemoryTokenStore(), refresher: refresher, configuration: .init(clock: time.clock))
        let credentials = Credentials(
            accessToken: "at-0", refreshToken: "rt-0", expiresAt: time.now.addingTimeInterval(3600))
        _ = try await controller.open(UserSessionPrototype(userInfo: UserInfo(id: "user"), credentials: credentials))
        return (controller, refresher, time)
    }

    @Test func authenticationFailureRefreshesOnceAndReplays() async throws {
        let (controller, refresher, _) = try await Self.makeController()
        let seen = Locked<[String]>([])
        let result = try await controller.withAccessToken(isAuthenticationFailure: Self.isUnauthorized) { token in
            seen.withLock { $0.append(token) }
            if token == "at-0" { throw Unauthorized() }
            return "ok with \(token)"
        }
        #expect(result == "ok with at-1")
        #expect(seen.withLock { $0 } == ["at-0", "at-1"])
        #expect(refresher.calls == 1)
    }

    @Test func replacedTokenIsReplayedWithoutRefresh() async throws {
        let (controller, refresher, _) = try await Self.makeController()
        let seen = Locked<[String]>([])
        let result = try await controller.withAccessToken(isAuthenticationFailure: Self.isUnauthorized) { token in
            seen.withLock { $0.append(token) }
            if token == "at-0" {
                // Someone else refreshed meanwhile; the failure is about the old token.
                _ = try await controller.refreshCredentials()
                throw Unauthorized()
            }
            return token
        }
        #expect(result == "at-1")
        #expect(seen.withLock { $0 } == ["at-0", "at-1"])
        #expect(refresher.calls == 1)
    }

    @Test func secondAuthenticationFailureIsThrown() async throws {
        let (controller, refresher, _) = try await Self.makeController()
        let attempts = Locked(0)
        await #expect(throws: Unauthorized.self) {
            try await controller.withAccessToken(isAuthenticationFailure: Self.isUnauthorized) { _ -> Int in
                attempts.withLock { $0 += 1 }
                throw Unauthorized()
            }
        }
        #expect(attempts.withLock { $0 } == 2)
        #expect(refresher.calls == 1)
    }

    @Test func otherErrorsPassThroughUntouched() async throws {
        let (controller, refresher, _) = try await Self.makeController()
        let attempts = Locked(0)
        await #expect(throws: Unrelated.self) {
            try await controller.withAccessToken(isAuthenticationFailure: Self.isUnauthorized) { _ -> Int in
                attempts.withLock { $0 += 1 }
                throw Unrelated()
            }
        }
        #expect(attempts.withLock { $0 } == 1)
        #expect(refresher.calls == 0)
    }

    @Test func concurrentReplaysShareOneRefresh() async throws {
        let (controller, refresher, _) = try await Self.makeController()
        let results = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<200 {
                group.addTask {
                    try await controller.withAccessToken(isAuthenticationFailure: Self.isUnauthorized) { token in
                        if token == "at-0" { throw Unauthorized() }
                        return token
                    }
                }
            }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(Set(results) == ["at-1"])
        #expect(refresher.calls == 1)
    }

    @Test func replayRefreshFailureIsThrownAndLoopBreakerStopsRepeatedRefreshes() async throws {
        let (controller, refresher, _) = try await Self.makeController()
        // Every token is rejected: each call refreshes once; the fourth refresh within 30 s is refused.
        for _ in 0..<3 {
            await #expect(throws: Unauthorized.self) {
                try await controller.withAccessToken(isAuthenticationFailure: Self.isUnauthorized) { _ -> Int in
                    throw Unauthorized()
                }
            }
        }
        let events = controller.events(bufferSize: 100)
        await #expect(throws: UserSessionError(.refreshLoop, "")) {
            try await controller.withAccessToken(isAuthenticationFailure: Self.isUnauthorized) { _ -> Int in
                throw Unauthorized()
            }
        }
        #expect(refresher.calls == 3)
        var iterator = events.makeAsyncIterator()
        _ = await iterator.next()  // .current
        #expect(await iterator.next()?.kind == .refreshLoopTripped)
    }

    @Test func nonSendableResultsAndStateWorkAtNaturalCallSites() async throws {
        final class Page {
            var items: [String] = []
        }
        let (controller, _, _) = try await Self.makeController()
        let page = try await controller.withAccessToken(isAuthenticationFailure: Self.isUnauthorized) { token in
            let page = Page()
            page.items.append(token)
            return page
        }
        #expect(page.items == ["at-0"])
    }

    @Test func updateCredentialsPersistsPublishesAndAnnouncesTheChange() async throws {
        let (controller, refresher, time) = try await Self.makeController()
        let events = controller.events(bufferSize: 100)
        let updated = Credentials(
            accessToken: "at-granted", refreshToken: "rt-granted", expiresAt: time.now.addingTimeInterval(7200),
            grantedPermissions: ["photos"])
        try await controller.updateCredentials(updated)
        #expect(controller.credentials?.accessToken == "at-granted")
        #expect(try await controller.accessToken() == "at-granted")
        #expect(try await controller.store.load(identifier: "user")?.credentials?.accessToken == "at-granted")
        var iterator = events.makeAsyncIterator()
        _ = await iterator.next()
        #expect(await iterator.next()?.kind == .credentialsUpdated(.init(extended: true, addedPermissions: ["photos"])))
        #expect(refresher.calls == 0)
    }
}
