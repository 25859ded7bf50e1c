import Foundation

@testable import UserSessions

/// An ordered, thread-safe log of what services did ("start:A", "started:A", "stop:A", "stopped:A").
final class ServiceLog: Sendable {
    private let entries = Locked<[String]>([])

    init() {}

    func append(_ entry: String) { entries.withLock { $0.append(entry) } }

    /// Everything logged so far.
    var all: [String] { entries.withLock { $0 } }

    /// The entries with `prefix` (such as "stop:"), without the prefix.
    func names(_ prefix: String) -> [String] {
        all.filter { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
    }
}

/// A hold that a service's `start` waits on until the test releases it or the starting task is cancelled.
final class CancellableHold: Sendable {
    private struct State {
        var released = false
        var waiters: [UUID: CheckedContinuation<Void, any Error>] = [:]
    }
    private let state = Locked(State())

    init() {}

    /// Waits until ``release()``; throws `CancellationError` at once when the waiting task is cancelled.
    func wait() async throws {
        let id = UUID()
        try await withTaskCancellationHandler {
            try await withVisibleCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resume: Result<Void, any Error>? = state.withLock { state in
                    if state.released { return .success(()) }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.waiters[id] = continuation
                    return nil
                }
                if let resume { continuation.resumeVisibly(with: resume) }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resumeVisibly(throwing: CancellationError())
        }
    }

    /// Releases every waiter, now and later.
    func release() {
        let waiters = state.withLock { state in
            state.released = true
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resumeVisibly() }
    }
}

/// A configurable service that logs its calls.
struct RecordingService: UserSessionService {
    let name: String
    let log: ServiceLog
    /// How many times `start` yields before finishing (to shuffle interleavings without sleeping).
    var startYields = 0
    /// Thrown by `start`, after its yields.
    var startFailure: (any Error)?
    /// Counts calls to `start`.
    var startArrivals: ArrivalCounter?
    /// `start` waits here (cancellation ends the wait with `CancellationError`).
    var startHold: CancellableHold?
    /// `start` waits here ignoring cancellation.
    var stubbornStartGate: AsyncGate?
    /// Counts calls to `stop`.
    var stopArrivals: ArrivalCounter?
    /// `stop` waits here, ignoring cancellation.
    var stopGate: AsyncGate?

    init(_ name: String, log: ServiceLog) {
        self.name = name
        self.log = log
    }

    func start(session: UserSession) async throws {
        log.append("start:\(name)")
        startArrivals?.arrive()
        for _ in 0..<startYields { await Task.yield() }
        if let startHold { try await startHold.wait() }
        if let stubbornStartGate { await stubbornStartGate.wait() }
        if let startFailure { throw startFailure }
        log.append("started:\(name)")
    }

    func stop(session: UserSession) async {
        log.append("stop:\(name)")
        stopArrivals?.arrive()
        if let stopGate { await stopGate.wait() }
        log.append("stopped:\(name)")
    }
}

/// A failure thrown by test services.
struct ServiceBoom: Error, Equatable {}

/// A refresher that hands out new credentials valid for an hour, counting calls.
final class LifecycleTestRefresher: TokenRefresher {
    private let calls = Locked(0)
    let now: @Sendable () -> Date

    init(now: @escaping @Sendable () -> Date = { Date() }) {
        self.now = now
    }

    var callCount: Int { calls.withLock { $0 } }

    func refresh(_ credentials: Credentials) async throws -> Credentials {
        let count = calls.withLock { value -> Int in
            value += 1
            return value
        }
        var fresh = credentials
        fresh.accessToken = "access-\(count)"
        fresh.expiresAt = now().addingTimeInterval(3600)
        fresh.lastRefreshedAt = now()
        fresh.source = .refresh
        return fresh
    }
}

/// A store that wraps ``InMemoryTokenStore`` and can be told to fail.
final class FaultyTokenStore: ForwardingTokenStore {
    struct Faults {
        var load: UserSessionError?
        var save: UserSessionError?
        var loadCurrentIdentifier: UserSessionError?
    }
    let base = InMemoryTokenStore()
    var forwardedTo: any TokenStore { base }
    private let faults = Locked(Faults())

    init() {}

    func setFaults(_ change: (inout Faults) -> Void) { faults.withLock { change(&$0) } }

    func load(identifier: String) async throws -> StoredSession? {
        if let error = faults.withLock({ $0.load }) { throw error }
        return try await base.load(identifier: identifier)
    }

    func save(_ session: StoredSession, identifier: String) async throws {
        if let error = faults.withLock({ $0.save }) { throw error }
        try await base.save(session, identifier: identifier)
    }

    func loadCurrentIdentifier() async throws -> String? {
        if let error = faults.withLock({ $0.loadCurrentIdentifier }) { throw error }
        return try await base.loadCurrentIdentifier()
    }
}

/// A prototype for user `id` with credentials that are valid for an hour from `now`.
func makePrototype(_ id: String, now: Date = Date(), refreshable: Bool = true) -> UserSessionPrototype {
    UserSessionPrototype(
        userInfo: UserInfo(id: id, email: "\(id)@example.com", name: "User \(id)"),
        credentials: Credentials(
            accessToken: "access-\(id)", refreshToken: refreshable ? "refresh-\(id)" : nil,
            expiresAt: now.addingTimeInterval(3600), lastRefreshedAt: now, source: .signIn))
}

/// Services named "0", "1", … logging to `log`.
func makeServices(_ count: Int, log: ServiceLog, configure: (Int, inout RecordingService) -> Void = { _, _ in })
    -> [any UserSessionService]
{
    (0..<count).map { index in
        var service = RecordingService("\(index)", log: log)
        configure(index, &service)
        return service
    }
}

extension UserSessionController {
    /// How many lifecycle calls are parked in the turnstile.
    var parkedCallCount: Int { lifecycle.waiterCount }
}

/// Suspends (yielding) until `condition` holds; for conditions that a parked call makes true without any event.
func yieldUntil(_ condition: () async -> Bool) async {
    while await !condition() { await Task.yield() }
}
