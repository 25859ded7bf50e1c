/// Whether one session's newest credentials are in the store, and what to do when they are not.
///
/// A pure state machine: a private `enum State` whose cases carry exactly the data valid in them, one
/// `mutating func` per input, named after what happened. Every input is defined in every state (an input that does
/// not apply changes nothing), so it has no `preconditionFailure`. ``RefreshStateMachine`` owns it next to
/// ``FlightMachine``; who may write *now* is ``PersistenceSlot``'s business.
///
/// ```
/// clean ──refreshPublished, write failed──▶ dirty(failures, retryAt) ──retryAsked──▶ (a retry runs)
///   ▲                                         │   ▲                                      │
///   │                                         │   └──retryFinished, failed: back off further┘
///   └──retryFinished (newest version) / refreshPublished, written / finalFlushBegan / recordRemoved ◀──┘
/// signedOut(): a clear bumps the epoch; a write taken under an older epoch that lands late is rewritten.
/// ```
struct PersistenceMachine {
    private enum State {
        /// The newest credentials are in the store.
        case clean
        /// They are not, after `failures` failed writes; the next retry is due at `retryAt` (`.infinity`: only the
        /// final flush of a closing session writes them).
        case dirty(failures: Int, retryAt: Double)
    }

    private var state = State.clean
    /// Bumped whenever new credentials are published; a write carries the version it stores.
    private(set) var version: UInt64 = 0
    /// A retry handed to the gate that has not reported back: at most one runs at a time, whatever the state.
    private var retryOutstanding = false
    /// The flight whose credentials are being written now (between `commitStarted` and `commitFinished`).
    private var committingFlight: UInt64?
    /// Bumped by every `closeAndClear()` (``signedOut()``): a write of the active session's record whose target was
    /// taken under an older epoch and lands late makes the session write its newest credentials again. Each write
    /// target carries the epoch it was taken in.
    private(set) var epoch: UInt64 = 0

    /// Whether the newest credentials are not in the store yet.
    var isDirty: Bool {
        if case .dirty = state { return true }
        return false
    }

    /// When a retry should start, when one is waiting and none runs.
    var pendingRetryAt: Double? {
        guard case .dirty(_, let retryAt) = state, !retryOutstanding, retryAt.isFinite else { return nil }
        return retryAt
    }

    // MARK: - Credentials published

    /// A session opened with credentials already in the store.
    mutating func activated() {
        version += 1
        state = .clean
        retryOutstanding = false
    }

    /// A refresh's credentials were published; `written` says whether the store has them. A failed write backs off
    /// by `delay(failures)` from `now`.
    mutating func refreshPublished(written: Bool, now: Double, delay: (Int) -> Double) {
        version += 1
        if written {
            state = .clean
        } else {
            backOff(now: now, delay: delay)
        }
    }

    /// Credentials handed over were published, which the store already has (written before they were published).
    mutating func updatePublished() {
        version += 1
        state = .clean
    }

    /// The record was removed elsewhere: the credentials in memory will never be written.
    mutating func recordRemoved() {
        state = .clean
    }

    // MARK: - Writes of a refresh's credentials

    /// The credentials of `flightID` started being written, as version ``version`` + 1.
    mutating func commitStarted(flightID: UInt64) {
        committingFlight = flightID
    }

    /// That write finished: whether it was `flightID`'s.
    mutating func commitFinished(flightID: UInt64) -> Bool {
        defer { committingFlight = nil }
        return committingFlight == flightID
    }

    /// The write of a refresh whose session ended while it ran failed: its credentials are kept in memory as the
    /// newest, for the final flush.
    mutating func lateCommitFailed() {
        version += 1
        if case .clean = state { state = .dirty(failures: 0, retryAt: .infinity) }
    }

    /// The session ended and its final flush began: the version to write one last time, if the store lacks it.
    /// Clean afterwards either way.
    mutating func finalFlushBegan() -> UInt64? {
        defer { state = .clean }
        return isDirty ? version : nil
    }

    // MARK: - Retries

    /// Someone asked at `now` whether a retry is due (a token request, the retry timer): hands one out when one is
    /// due and none runs.
    mutating func retryAsked(now: Double) -> Bool {
        guard case .dirty(_, let retryAt) = state, !retryOutstanding, now >= retryAt else { return false }
        retryOutstanding = true
        return true
    }

    /// The outstanding retry began, holding the slot: the version to write, or `nil` (and the retry is over) when
    /// there is nothing left to write.
    mutating func retryBegan() -> UInt64? {
        guard isDirty else {
            retryOutstanding = false
            return nil
        }
        return version
    }

    /// The outstanding retry ended without writing (the session changed, or a coordinated store held a newer
    /// record, which stands).
    mutating func retryDropped() {
        retryOutstanding = false
    }

    /// The outstanding retry wrote `written` (or failed to).
    mutating func retryFinished(written: UInt64, succeeded: Bool, now: Double, delay: (Int) -> Double) {
        retryOutstanding = false
        guard isDirty else { return }
        if !succeeded {
            backOff(now: now, delay: delay)
        } else if written == version {
            state = .clean
        }
    }

    // MARK: - The clear fence

    /// The identifier signed out (`closeAndClear()` removes the record): no write taken before this point may land
    /// afterwards.
    mutating func signedOut() {
        epoch += 1
    }

    /// The store was found not to have the newest credentials (a write left behind by a close landed after a newer
    /// one, or a restore adopted a rotation the ledger had not written yet): write them again, now.
    mutating func foundUnwritten(now: Double) {
        let failures: Int
        if case .dirty(let previous, _) = state { failures = previous } else { failures = 0 }
        state = .dirty(failures: failures, retryAt: now)
        retryOutstanding = false
    }

    private mutating func backOff(now: Double, delay: (Int) -> Double) {
        let failures: Int
        if case .dirty(let previous, _) = state { failures = previous + 1 } else { failures = 1 }
        state = .dirty(failures: failures, retryAt: now + delay(failures))
    }
}
