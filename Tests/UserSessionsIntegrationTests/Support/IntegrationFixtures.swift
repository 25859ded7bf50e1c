#if Logging || Metrics || ServiceLifecycle || Tracing
import Foundation
import Synchronization
import UserSessions
import UserSessionsTestSupport

/// Shared values and helpers of the integration tests.
enum Fixtures {
    static let accessToken = "at-SECRET-4d1f8a2c"
    static let refreshToken = "rt-SECRET-9e7b3c05"
    static let rotatedAccessToken = "at-SECRET-rotated-61a0"
    static let rotatedRefreshToken = "rt-SECRET-rotated-c3d2"
    static let secrets = [accessToken, refreshToken, rotatedAccessToken, rotatedRefreshToken]

    /// Credentials valid for a long time, so nothing refreshes unless a test asks.
    static func credentials(access: String = accessToken, refresh: String = refreshToken) -> Credentials {
        Credentials(
            accessToken: access, refreshToken: refresh, expiresAt: Date().addingTimeInterval(3600), source: .signIn)
    }

    static func prototype(_ identifier: String) -> UserSessionPrototype {
        UserSessionPrototype(
            identifier: identifier, userInfo: UserInfo(id: identifier), credentials: credentials())
    }

    /// A configuration whose loop breaker never trips unless a test lowers it.
    static func configuration(observers: [any UserSessionObserver] = []) -> UserSessionController.Configuration {
        var configuration = UserSessionController.Configuration(
            refreshLoopPolicy: .init(maximumRefreshes: 10_000, window: .seconds(1)))
        configuration.observers = observers
        return configuration
    }

    static func transientFailure() -> UserSessionError {
        UserSessionError(.refreshFailed, "the token endpoint answered 503", failureClass: .transient)
    }

    static func terminalFailure() -> UserSessionError {
        UserSessionError(.refreshFailed, "invalid_grant", failureClass: .terminal)
    }
}

/// An error of the user's that prints a secret: it must never reach a log line.
struct LeakyError: Error, CustomStringConvertible {
    var description: String { "LeakyError(token: \(Fixtures.refreshToken))" }
}

/// A refresher that answers from a script, one result per call, then rotated credentials.
final class ScriptedRefresher: TokenRefresher {
    private let script: Locked<[Result<Credentials, any Error>]>
    private let callCount = Atomic<Int>(0)

    init(_ script: [Result<Credentials, any Error>] = []) {
        self.script = Locked(script)
    }

    var calls: Int { callCount.load(ordering: .relaxed) }

    func refresh(_ credentials: Credentials) async throws -> Credentials {
        callCount.wrappingAdd(1, ordering: .relaxed)
        let next = script.withLock { $0.isEmpty ? nil : $0.removeFirst() }
        return try
            (next
            ?? .success(
                Fixtures.credentials(
                    access: Fixtures.rotatedAccessToken, refresh: Fixtures.rotatedRefreshToken))).get()
    }
}

/// A refresher that can revoke and whose revocation always fails with `error` (by default a misconfiguration
/// whose message carries the refresh token, which must be redacted before it reaches an event or a log line).
struct FailingRevoker: TokenRefresher {
    var error: any Error = UserSessionError(
        .revocationFailed, "the server refused \(Fixtures.refreshToken)", failureClass: .misconfiguration)

    var canRevoke: Bool { true }

    func refresh(_ credentials: Credentials) async throws -> Credentials { credentials }

    func revoke(_ credentials: Credentials) async throws { throw error }
}

/// An in-memory store whose writes fail while `failsWrites` is on.
final class FlakyStore: ForwardingTokenStore {
    let base = InMemoryTokenStore()
    var forwardedTo: any TokenStore { base }
    private let failing = Atomic<Bool>(false)

    var failsWrites: Bool {
        get { failing.load(ordering: .relaxed) }
        set { failing.store(newValue, ordering: .relaxed) }
    }

    func save(_ session: StoredSession, identifier: String) async throws {
        if failsWrites { throw LeakyError() }
        try await base.save(session, identifier: identifier)
    }
}

/// An observer that hands every refresh report and event to the test as streams. Listed after the observer under
/// test, it tells the test when that observer has seen a report: observers are called in order.
final class ObservationProbe: UserSessionObserver {
    let reports: AsyncStream<UserSessionRefreshReport>
    private let reportContinuation: AsyncStream<UserSessionRefreshReport>.Continuation
    private let observedEvents = Locked<[UserSessionEvent]>([])

    init() {
        (reports, reportContinuation) = AsyncStream.makeStream()
    }

    var events: [UserSessionEvent] { observedEvents.withLock { $0 } }

    func observe(_ event: UserSessionEvent, context: UserSessionEventContext) {
        observedEvents.withLock { $0.append(event) }
    }

    func observeRefresh(_ report: UserSessionRefreshReport) {
        reportContinuation.yield(report)
    }

    /// Waits for the next `count` refresh reports.
    func nextReports(_ count: Int) async -> [UserSessionRefreshReport] {
        var collected: [UserSessionRefreshReport] = []
        for await report in reports {
            collected.append(report)
            if collected.count == count { break }
        }
        return collected
    }
}
#endif
