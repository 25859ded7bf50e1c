import Synchronization

/// The single flight of one session's refreshes: whether a refresh runs (and who waits for it), whether the last
/// ones failed (and how long to back off), or whether the session's refreshes are over.
///
/// A pure state machine: a private `enum State` whose cases carry exactly the data valid in them, one
/// `mutating func` per input, named after what happened, `preconditionFailure` on a transition that cannot happen.
/// ``RefreshStateMachine`` owns it and decides *when* to start a refresh (lead time, soft window, breaker); this
/// machine keeps *what* is running and how past failures constrain the next one.
///
/// ```
/// idle ──started──▶ refreshing ──succeeded──▶ idle
///  ▲                │  │  │
///  │                │  │  └──failed (transient, misconfiguration)──▶ failed(backoff) ──started──▶ refreshing
///  │                │  └──sessionEnded──▶ idle, or failed(backoff) when it started from one
///  │                └──failed (terminal)──▶ terminated
///  │   terminated(by:) ──▶ terminated, from any state
///  │   backedOffElsewhere ──▶ failed(backoff), from idle or an earlier backoff
///  └── credentialsChanged ──▶ idle from any state
/// ```
struct FlightMachine {
    /// One refresh in progress.
    struct Flight {
        let id: UInt64
        /// When it started: the issue time of the credentials it returns, if they do not say.
        let startedAt: Double
        /// Last, so that its byte ends the refreshing state, where the refresh machine's flags follow it.
        let kind: RefreshStateMachine.FlightKind
    }

    /// What failed refreshes left behind: nothing starts on its own before `retryAt`.
    ///
    /// A class, made once per failure and never changed: the machine of a session that never failed carries no
    /// room for it, only a reference while it backs off.
    final class Backoff: Sendable {
        /// Consecutive failed refreshes, for the next delay.
        let failures: Int
        /// While the token is still valid, no automatic refresh starts before this time.
        let retryAt: Double
        /// Served to token requests for an expired token until `retryAt`.
        let lastFailure: UserSessionError
        /// After a misconfiguration failure, nothing refreshes automatically until credentials change.
        let blocksAutomaticRefresh: Bool

        init(failures: Int, retryAt: Double, lastFailure: UserSessionError, blocksAutomaticRefresh: Bool) {
            self.failures = failures
            self.retryAt = retryAt
            self.lastFailure = lastFailure
            self.blocksAutomaticRefresh = blocksAutomaticRefresh
        }
    }

    private enum State {
        /// No refresh runs; nothing failed since the credentials last changed.
        case idle
        /// `flight` runs; `waiters` wait for it, sorted by id. `backoff` is what failed before it, carried on so a
        /// failure of this flight backs off further. The flight comes last: its last byte ends the machine, and the
        /// refresh machine lays its flags right after it.
        case refreshing(
            waiters: FlightWaiters<RefreshStateMachine.ParkedCaller>, backoff: Backoff?, flight: Flight)
        /// No refresh runs; the last ones failed.
        case failed(Backoff)
        /// A terminal failure (revoked credentials, the record cleared elsewhere): every request fails with
        /// `error` until the credentials change.
        indirect case terminated(UserSessionError)
    }

    private var state = State.idle
    /// Flight ids: one counter for the process (an id need only be unique and increasing per session, to tell a
    /// current flight from a finished one), so an idle session keeps none.
    private static let flightIDs = Atomic<UInt64>(0)

    // MARK: - Reading

    /// The refresh in progress, if any.
    var current: Flight? {
        if case .refreshing(_, _, let flight) = state { return flight }
        return nil
    }

    /// Whether a refresh runs. Matched by pattern: copies nothing.
    var isRefreshing: Bool {
        if case .refreshing = state { return true }
        return false
    }

    /// Whether `id` is the refresh in progress.
    func isCurrent(_ id: UInt64) -> Bool {
        if case .refreshing(_, _, let flight) = state { return flight.id == id }
        return false
    }

    /// The terminal failure, when the session's refreshes are over.
    var terminalError: UserSessionError? {
        if case .terminated(let error) = state { return error }
        return nil
    }

    /// Whether the session's refreshes are over (pattern-matched: copies nothing).
    var isTerminated: Bool {
        if case .terminated = state { return true }
        return false
    }

    /// The backoff of the failures since the credentials last changed, when not refreshing.
    var backoff: Backoff? {
        if case .failed(let backoff) = state { return backoff }
        return nil
    }

    /// When automatic refreshes may start again: `-infinity` unless the last refreshes failed.
    var retryAt: Double {
        if case .failed(let backoff) = state { return backoff.retryAt }
        return -.infinity
    }

    /// Whether a misconfiguration failure stopped automatic refreshes until the credentials change.
    var blocksAutomaticRefresh: Bool {
        if case .failed(let backoff) = state { return backoff.blocksAutomaticRefresh }
        return false
    }

    /// The waiters of the refresh in progress (for tests).
    var waiters: [RefreshStateMachine.Waiter] {
        if case .refreshing(let waiters, _, _) = state { return waiters.all }
        return []
    }

    // MARK: - Inputs

    /// A refresh of `kind` started at `now`; returns its id.
    mutating func started(_ kind: RefreshStateMachine.FlightKind, now: Double) -> UInt64 {
        let backoff: Backoff?
        switch state {
        case .idle: backoff = nil
        case .failed(let previous): backoff = previous
        case .refreshing: preconditionFailure("a refresh started while another one runs")
        case .terminated: preconditionFailure("a refresh started after a terminal failure")
        }
        let id = Self.flightIDs.wrappingAdd(1, ordering: .relaxed).newValue
        let flight = Flight(id: id, startedAt: now, kind: kind)
        state = .refreshing(waiters: FlightWaiters(), backoff: backoff, flight: flight)
        return id
    }

    /// A caller started waiting for the refresh in progress. Ids come from an atomic counter, so a later id may
    /// occasionally arrive first: the waiters stay sorted.
    mutating func waiterJoined(_ waiter: RefreshStateMachine.Waiter) {
        guard case .refreshing(var waiters, let backoff, let flight) = state else {
            preconditionFailure("a waiter joined while no refresh runs")
        }
        state = .idle  // drops the enum's reference, so the insertion does not copy the array
        waiters.add(waiter)
        state = .refreshing(waiters: waiters, backoff: backoff, flight: flight)
    }

    /// A waiter's task was cancelled: returns its continuation (to resume with `CancellationError`) if it still
    /// waits. Leaves a tombstone, so the array stays sorted for the binary search.
    mutating func waiterCancelled(id: UInt64) -> RefreshStateMachine.ParkedCaller? {
        guard case .refreshing(var waiters, let backoff, let flight) = state else { return nil }
        state = .idle  // drops the enum's reference, so the tombstone does not copy the array
        let continuation = waiters.remove(id: id)
        state = .refreshing(waiters: waiters, backoff: backoff, flight: flight)
        return continuation
    }

    /// The refresh in progress returned credentials: the failures are forgotten. Returns it and its waiters.
    mutating func succeeded() -> (flight: Flight, waiters: [RefreshStateMachine.Waiter]) {
        guard case .refreshing(let waiters, _, let flight) = state else {
            preconditionFailure("a refresh succeeded while none runs")
        }
        state = .idle
        return (flight, waiters.all)
    }

    /// The refresh in progress failed with `error` of `failureClass`. A terminal failure ends the session's
    /// refreshes; any other backs off by `delay(failures)` from `now`, or by `shared`, the backoff the ledger keeps
    /// for every holder of the credentials, when it has one (a transient failure of a session whose automatic
    /// refreshes no misconfiguration stopped). Returns it and its waiters.
    mutating func failed(
        _ error: UserSessionError, failureClass: RefreshFailureClass, now: Double, shared: Backoff? = nil,
        delay: (Int) -> Double
    ) -> (flight: Flight, waiters: [RefreshStateMachine.Waiter]) {
        guard case .refreshing(let waiters, let previous, let flight) = state else {
            preconditionFailure("a refresh failed while none runs")
        }
        switch (failureClass, shared) {
        case (.terminal, _):
            state = .terminated(error)
        case (.transient, let shared?) where previous?.blocksAutomaticRefresh != true:
            state = .failed(shared)
        case (.misconfiguration, _), (.transient, _), (.cancelled, _):
            let failures = (previous?.failures ?? 0) + 1
            state = .failed(
                Backoff(
                    failures: failures, retryAt: now + delay(failures), lastFailure: error,
                    blocksAutomaticRefresh: failureClass == .misconfiguration
                        || previous?.blocksAutomaticRefresh == true))
        }
        return (flight, waiters.all)
    }

    /// Another holder's refresh of the same credentials failed for a while (the ledger's `backoff`): a session with
    /// no refresh running and no later backoff of its own backs off with it, so it does not ask the failing server
    /// again before `backoff.retryAt`. A session whose misconfiguration stopped its automatic refreshes keeps its own
    /// backoff (a request of it for an expired token is still answered from the shared one, by the ledger). Returns
    /// whether it did.
    mutating func backedOffElsewhere(_ backoff: Backoff) -> Bool {
        switch state {
        case .idle:
            state = .failed(backoff)
            return true
        case .failed(let own) where own.retryAt < backoff.retryAt && !own.blocksAutomaticRefresh:
            state = .failed(backoff)
            return true
        case .failed, .refreshing, .terminated:
            return false
        }
    }

    /// The session's refreshes were ended from outside (its record was removed elsewhere), in any state. Returns
    /// the waiters to fail.
    mutating func terminated(by error: UserSessionError) -> [RefreshStateMachine.Waiter] {
        defer { state = .terminated(error) }
        return waiters
    }

    /// The session ended: the refresh in progress (returned) goes on without it, its waiters are returned to fail.
    /// What failed before it started stays (`failed`), unread, until ``credentialsChanged()``; in any other
    /// state nothing changes.
    mutating func sessionEnded() -> (flight: Flight?, waiters: [RefreshStateMachine.Waiter]) {
        guard case .refreshing(let waiters, let backoff, let flight) = state else { return (nil, []) }
        state = backoff.map { .failed($0) } ?? .idle
        return (flight, waiters.all)
    }

    /// The credentials changed (a new session, or credentials obtained elsewhere): from any state, everything starts
    /// over (`idle`). Returns the waiters of a refresh that was superseded.
    mutating func credentialsChanged() -> [RefreshStateMachine.Waiter] {
        let superseded = waiters
        state = .idle
        return superseded
    }
}

extension FlightMachine.Backoff: Equatable {
    /// The same backoff: one object, made once per failure (a view and the ledger share it).
    static func == (lhs: FlightMachine.Backoff, rhs: FlightMachine.Backoff) -> Bool { lhs === rhs }
}
