import Foundation
import Testing

@testable import UserSessions

/// A ``TokenStore`` method, as a place where a fault can be injected.
enum StoreCallSite: String, CaseIterable, Sendable {
    case load, save, remove, loadCurrentIdentifier, saveCurrentIdentifier
}

/// What goes wrong at a call site.
enum StoreFault: String, CaseIterable, Sendable {
    /// The call throws ``UserSessionError/Code/storeFailure`` (an I/O error).
    case fail
    /// The call waits until ``FaultPlanStore/releaseHangs()`` and then proceeds normally; it ignores cancellation,
    /// like a blocking system call.
    case hang
    /// The call waits until its task is cancelled (then throws `CancellationError`), like a network request that
    /// honours cancellation but never gets an answer; ``FaultPlanStore/releaseHangs()`` also releases it.
    case hangUntilCancelled
    /// The data is corrupt: a read throws ``UserSessionError/Code/storeCorrupt`` (what a correct store reports for
    /// unreadable data); `loadCurrentIdentifier` returns an identifier that no open could have persisted; a write
    /// "succeeds" but leaves unreadable data behind (a torn write a later read detects).
    case corrupt
}

/// One fault: `fault` at the `nth` call (1-based) to `site`, or at every call from the `nth` on while the store is
/// down (`persistent`), until ``FaultPlanStore/recover()``.
struct FaultPlan: Sendable, CustomStringConvertible {
    var site: StoreCallSite
    var fault: StoreFault
    var nth: Int = 1
    var persistent = false

    var description: String { "\(fault) at \(site) #\(nth)\(persistent ? "+" : "")" }
}

/// An in-memory ``TokenStore`` that injects the faults of a ``FaultPlan``, counts calls per site and records
/// arrivals at hangs so that tests can wait for them without sleeping.
final class FaultPlanStore: TokenStore {
    /// The identifier that a corrupt `loadCurrentIdentifier` returns: NUL-bearing, so no open could have stored it.
    static let corruptIdentifier = "\u{0}garbage\u{0}"

    private struct State {
        var plans: [FaultPlan] = []
        var calls: [StoreCallSite: Int] = [:]
        var injected = 0
        var recovered = false
        var corrupted: Set<String> = []
        var corruptCurrentIdentifier = false
        var saves: [(identifier: String, session: StoredSession)] = []
    }
    private let state = Locked(State())
    let base = InMemoryTokenStore()
    private let hangGate = AsyncGate()
    private let cancellableHold = CancellableHold()
    /// One arrival per call that starts hanging.
    let hangs = ArrivalCounter()
    /// One arrival per successful save.
    let savesDone = ArrivalCounter()
    /// One arrival per successful remove.
    let removesDone = ArrivalCounter()

    init(_ plans: [FaultPlan] = []) {
        state.withLock { $0.plans = plans }
    }

    /// Adds faults (counted from the calls made so far: `nth` is absolute).
    func inject(_ plan: FaultPlan) {
        state.withLock {
            $0.plans.append(plan)
            $0.recovered = false
        }
    }

    /// The store comes back: persistent faults stop (one-shot faults that have not fired yet stay armed).
    func recover() {
        state.withLock { state in
            state.recovered = true
            state.plans.removeAll { $0.persistent }
        }
    }

    /// Removes every fault that has not fired yet (and the persistent ones).
    func disarm() {
        state.withLock { $0.plans.removeAll() }
    }

    /// Releases every hang, now and later.
    func releaseHangs() {
        hangGate.open()
        cancellableHold.release()
    }

    /// How many faults fired.
    var injectedCount: Int { state.withLock { $0.injected } }
    /// How many calls `site` received.
    func calls(_ site: StoreCallSite) -> Int { state.withLock { $0.calls[site, default: 0] } }
    /// Every successful save, in order.
    var saves: [(identifier: String, session: StoredSession)] { state.withLock { $0.saves } }
    /// What is stored for `identifier`, bypassing faults (`nil` when nothing is, or the data is corrupt).
    func stored(_ identifier: String) async -> StoredSession? {
        if state.withLock({ $0.corrupted.contains(identifier) }) { return nil }
        return try? await base.load(identifier: identifier)
    }
    /// The persisted current identifier, bypassing faults.
    var storedCurrentIdentifier: String? {
        get async {
            if state.withLock({ $0.corruptCurrentIdentifier }) { return Self.corruptIdentifier }
            return try? await base.loadCurrentIdentifier()
        }
    }

    /// Counts the call and returns the fault to inject, if any.
    private func arrive(_ site: StoreCallSite) -> StoreFault? {
        state.withLock { state in
            state.calls[site, default: 0] += 1
            let number = state.calls[site, default: 0]
            guard
                let plan = state.plans.first(where: {
                    $0.site == site && ($0.persistent ? number >= $0.nth : number == $0.nth)
                })
            else { return nil }
            state.injected += 1
            return plan.fault
        }
    }

    /// Runs the fault's failure or hang, if it has one (a hang that ends proceeds with the call).
    private func perform(_ fault: StoreFault?, _ site: StoreCallSite) async throws {
        switch fault {
        case nil, .corrupt:
            return
        case .fail:
            throw UserSessionError(.storeFailure, "injected \(site) failure")
        case .hang:
            hangs.arrive()
            await hangGate.wait()
        case .hangUntilCancelled:
            hangs.arrive()
            try await cancellableHold.wait()
        }
    }

    func load(identifier: String) async throws -> StoredSession? {
        let fault = arrive(.load)
        try await perform(fault, .load)
        if fault == .corrupt || state.withLock({ $0.corrupted.contains(identifier) }) {
            throw UserSessionError(.storeCorrupt, "the stored session is unreadable")
        }
        return try await base.load(identifier: identifier)
    }

    func save(_ session: StoredSession, identifier: String) async throws {
        let fault = arrive(.save)
        try await perform(fault, .save)
        state.withLock { state in
            if fault == .corrupt {
                state.corrupted.insert(identifier)
            } else {
                state.corrupted.remove(identifier)
                state.saves.append((identifier, session))
            }
        }
        try await base.save(session, identifier: identifier)
        savesDone.arrive()
    }

    func remove(identifier: String) async throws {
        let fault = arrive(.remove)
        try await perform(fault, .remove)
        // A corrupt remove claims success and removes nothing: the data stays, unreadable.
        if fault == .corrupt {
            state.withLock { _ = $0.corrupted.insert(identifier) }
            return
        }
        state.withLock { _ = $0.corrupted.remove(identifier) }
        try await base.remove(identifier: identifier)
        removesDone.arrive()
    }

    func loadCurrentIdentifier() async throws -> String? {
        let fault = arrive(.loadCurrentIdentifier)
        try await perform(fault, .loadCurrentIdentifier)
        if fault == .corrupt || state.withLock({ $0.corruptCurrentIdentifier }) { return Self.corruptIdentifier }
        return try await base.loadCurrentIdentifier()
    }

    func saveCurrentIdentifier(_ identifier: String?) async throws {
        let fault = arrive(.saveCurrentIdentifier)
        try await perform(fault, .saveCurrentIdentifier)
        state.withLock { $0.corruptCurrentIdentifier = fault == .corrupt }
        try await base.saveCurrentIdentifier(identifier)
    }

    func storedIdentifiers() async throws -> [String] { try await base.storedIdentifiers() }
}

/// A refresher that behaves like an OAuth server which rotates refresh tokens: each refresh with the current
/// refresh token returns `at-N` / `rt-N` and makes `rt-N` the only valid one; a refresh with any other refresh
/// token gets `invalid_grant` (a terminal failure).
///
/// Faults: ``loseResponse(onCall:)`` makes a call rotate on the "server" and then throw a transient error, as if
/// the response were lost on the way back; ``hang(onCall:)`` makes a call wait until ``release()`` (ignoring
/// cancellation) before it answers.
final class RotatingRefresher: TokenRefresher {
    private struct State {
        var validRefreshToken: String
        var calls = 0
        var lostResponses: Set<Int> = []
        var hangs: Set<Int> = []
        var received: [String?] = []
    }
    private let state: Locked<State>
    private let gate = AsyncGate()
    private let now: @Sendable () -> Date
    private let lifetime: TimeInterval
    /// One arrival per call, as it starts.
    let started = ArrivalCounter()
    /// One arrival per call, as it returns or throws.
    let finished = ArrivalCounter()

    init(validRefreshToken: String, lifetime: TimeInterval = 3600, now: @escaping @Sendable () -> Date) {
        state = Locked(State(validRefreshToken: validRefreshToken))
        self.lifetime = lifetime
        self.now = now
    }

    func loseResponse(onCall call: Int) { state.withLock { _ = $0.lostResponses.insert(call) } }
    func hang(onCall call: Int) { state.withLock { _ = $0.hangs.insert(call) } }
    func release() { gate.open() }

    /// The refresh token the "server" accepts now.
    var validRefreshToken: String { state.withLock { $0.validRefreshToken } }
    /// The refresh tokens the calls sent, in order.
    var received: [String?] { state.withLock { $0.received } }
    var calls: Int { state.withLock { $0.calls } }

    /// A transient failure: the request went out, the response never came back.
    struct ResponseLost: Error {}

    func refresh(_ credentials: Credentials) async throws -> Credentials {
        let (number, hangs) = state.withLock { state -> (Int, Bool) in
            state.calls += 1
            state.received.append(credentials.refreshToken)
            return (state.calls, state.hangs.contains(state.calls))
        }
        started.arrive()
        defer { finished.arrive() }
        if hangs { await gate.wait() }
        let outcome = state.withLock { state -> Result<Credentials, any Error> in
            guard credentials.refreshToken == state.validRefreshToken else {
                return .failure(
                    UserSessionError(
                        .refreshFailed, "invalid_grant: the refresh token is not valid", failureClass: .terminal))
            }
            state.validRefreshToken = "rt-\(number)"
            if state.lostResponses.contains(number) { return .failure(ResponseLost()) }
            return .success(
                Credentials(
                    accessToken: "at-\(number)", refreshToken: "rt-\(number)",
                    expiresAt: now().addingTimeInterval(lifetime), lastRefreshedAt: now(), source: .refresh))
        }
        return try outcome.get()
    }
}

/// A test took longer than its hang guard allowed.
struct HangGuardTripped: Error, CustomStringConvertible {
    let what: String
    var description: String { "hang guard: \(what) did not finish in time" }
}

/// Runs `body` and returns its result, or records an issue and throws ``HangGuardTripped`` when it does not finish
/// within `seconds` of real time.
///
/// Not a timing assertion: the bound is generous (30 s for work that takes microseconds, so that a machine busy
/// with other builds, whose cooperative pool can be starved for seconds, never trips it) and exists so that a hang
/// fails the test instead of hanging the suite. `body` runs in an unstructured task, because a task group would
/// wait for a child that ignores cancellation; a hung body is abandoned (cancelled, and left behind). The wait is
/// the package's own `Deadline.wait(for:timeout:clock:)`, in real time.
func withHangGuard<T: Sendable>(
    _ what: String, seconds: Int = 30, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let work = Task { try await body() }
    // A deadline, not an ordering device: it only passes if `body` hangs.
    guard await Deadline.wait(for: work, timeout: .seconds(seconds)) else {
        work.cancel()
        let tripped = HangGuardTripped(what: what)
        Issue.record("\(tripped)", sourceLocation: sourceLocation)
        throw tripped
    }
    return try await work.value
}
