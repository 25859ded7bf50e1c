import Foundation

/// The refresh rules of one session's credentials, as a pure state machine.
///
/// ``CredentialsGate`` holds it in a `Locked`, feeds it inputs (a token request, a refresh that returned, a write
/// that finished, …) and performs the actions it returns (start a refresh, write to the store, emit events, resume
/// waiters) after releasing the lock. Nothing here suspends, reads a clock or calls user code: the time and the
/// jitter come in as arguments, so every transition can be tested synchronously.
///
/// It keeps the session's own data (identity, credentials, the hot path's ``token`` and ``nextActionAt``, the
/// windows scaled to the token's lifetime, the loop breaker, the orphans) and composes three machines, each an
/// `enum State`: ``FlightMachine`` (the refresh in progress and its backoff), ``PersistenceMachine`` (whether the
/// store has the newest credentials) and ``PersistenceSlot`` (who may write now).
///
/// Times are seconds since the reference date (`Double`), the cheap form the hot path compares.
struct RefreshStateMachine {
    /// The refresh settings, as plain seconds (the cheap form the machine compares), normalized once.
    ///
    /// Built by the controller from its configuration (``UserSessionController/Configuration/refreshPolicy``);
    /// the machine knows nothing of the configuration itself.
    struct Policy: Sendable {
        var leadTime: Double
        var softWindow: Double
        var initialRetryDelay: Double
        var maximumRetryDelay: Double
        var loopMaximum: Int
        var loopWindow: Double

        /// For credentials whose lifetime is known, the lead time is at most this fraction of it.
        static let leadFraction = 0.1
        /// For credentials whose lifetime is known, the soft window is at most this fraction of it.
        static let softWindowFraction = 0.25
        /// The loop breaker's window never shrinks below this, however short the tokens live, so that tokens that
        /// arrive already expired still trip it.
        static let minimumLoopWindow = 1.0

        /// Clamps every setting into its valid range: the soft window is at least the lead time, the retry delays
        /// are positive and ordered, the breaker allows at least one refresh.
        init(
            leadTime: Duration, softWindow: Duration, initialRetryDelay: Duration, maximumRetryDelay: Duration,
            loopMaximum: Int, loopWindow: Duration
        ) {
            self.leadTime = max(0, leadTime.seconds)
            self.softWindow = max(self.leadTime, softWindow.seconds)
            self.initialRetryDelay = max(0.001, initialRetryDelay.seconds)
            self.maximumRetryDelay = max(self.initialRetryDelay, maximumRetryDelay.seconds)
            self.loopMaximum = max(1, loopMaximum)
            self.loopWindow = max(0, loopWindow.seconds)
        }
    }

    /// Why someone asks for credentials.
    enum Request: Equatable {
        /// `accessToken()`: a valid token, refreshing first if it is inside the lead time.
        case demand
        /// A forced refresh: `refreshCredentials()` (`replacing: nil`) or a replay after an authentication
        /// failure with the token the operation used. If that token is no longer current, the current credentials
        /// are returned without a refresh.
        case forced(replacing: String?)
        /// A replay after an authentication failure of an operation that used `replacing`, a token of the session
        /// of `generation`. Like ``forced(replacing:)``, but it fails when that session is no longer the active one:
        /// a replay never runs with another session's credentials.
        case replay(replacing: String, generation: UInt64)
        /// `accessToken(minimumValidity:)`: a token valid for at least this many seconds, refreshing if needed.
        case minimumValidity(Double)
        /// `restore`: the credentials must not be expired; refresh them if they are.
        case restore
    }

    /// Who started a refresh.
    enum FlightKind: Equatable {
        case background, demand, forced, restore
    }

    /// A refresh the gate must run: call the refresher with `credentials`, then report back with `flightID`.
    struct RefreshJob: Equatable {
        let flightID: UInt64
        let generation: UInt64
        let credentials: Credentials
        let kind: FlightKind
        /// The identifier and user the refresh is for (the ledger's key, and the record a rotation is written to).
        var identifier: String = ""
        var userInfo = UserInfo(id: "")
        /// The ledger fence of the session that started it: a sign-out since makes its result unwritable.
        var ledgerFence: UInt64 = 0
    }

    typealias Flight = FlightMachine.Flight

    let policy: Policy
    /// Whether the gate has a refresher: without one, nothing is ever refreshed.
    let hasRefresher: Bool

    // MARK: Session

    /// Which session the machine serves, if any (see ``Phase``).
    var phase = Phase.none
    /// The session's credentials with what derives from them: the hot path's token, the expiry, the lead time and
    /// windows scaled to their lifetime (see ``Held``). Replaced as a whole when the credentials change.
    var held: Held
    /// The hot path serves ``Held/token`` without looking at anything else while `now < nextActionAt`.
    ///
    /// It is the earliest moment something must happen: the soft window opens (after any backoff), the lead time
    /// starts, the token expires, or a failed write is due for a retry. `-infinity` when no token may be served.
    var nextActionAt = -Double.infinity

    // MARK: Refresh

    /// The refresh in progress and what past failures left (see ``FlightMachine``).
    var flights = FlightMachine()
    /// The refresh-loop breaker: when the last successful refreshes happened (see ``LoopBreaker``).
    var breaker = LoopBreaker()

    // MARK: Persistence

    /// Whether the newest credentials are in the store (see ``PersistenceMachine``).
    var persistence = PersistenceMachine()
    /// Who may write to the store now (see ``PersistenceSlot``).
    var slot = PersistenceSlot()
    /// Refreshes still running for sessions that ended while keeping their stored record (see ``Orphan``).
    var orphans: [UInt64: Orphan] = [:]
    /// The ledger's sign-out fence of the active session's identifier when it was activated: every write of the
    /// session is taken under it (see ``CredentialsLedger``).
    var ledgerFence: UInt64 = 0

    // MARK: Coordination (a ``CoordinatedTokenStore``)

    /// The stored record the active session's credentials were read from or last written as (see
    /// ``StoredBase``); empty for a store without coordination.
    var base = StoredBase()

    init(policy: Policy, hasRefresher: Bool) {
        self.policy = policy
        self.hasRefresher = hasRefresher
        held = Held(nil, policy: policy)
    }

    /// Whether the newest credentials are not in the store yet.
    var isDirty: Bool { persistence.isDirty }

    /// Whether there are credentials. Matched by pattern on purpose: `credentials != nil` picks `Equatable`'s `==`
    /// for optionals and copies the whole credentials (five reference-counted fields) to compare them with `nil`,
    /// under the lock, on every token request that misses the hot path.
    var hasCredentials: Bool {
        if case .some = held.credentials { return true }
        return false
    }

    /// Whether a terminal failure stopped the session's refreshes (pattern-matched, as ``hasCredentials``).
    var isTerminated: Bool { flights.isTerminated }

    /// Set by a terminal failure: every request fails with it until the next activation.
    var terminalError: UserSessionError? { flights.terminalError }

    // MARK: - Activation

    /// A session of `generation` opens with `credentials`. Returns waiters left from a previous session (only if
    /// the caller skipped `deactivate()`); they must be failed with ``UserSessionError/Code/sessionNotOpen``.
    ///
    /// Orphan refreshes of the same identifier lose the record to the new session; with `adoptingOrphans` (a
    /// restore from the stored record) one that sent the same refresh token becomes the new session's flight.
    mutating func activate(
        identifier: String, userInfo: UserInfo, credentials: Credentials?, generation: UInt64,
        adoptingOrphans: Bool = false, revision: UInt64? = nil, ledgerFence: UInt64 = 0
    ) -> [Waiter] {
        self.ledgerFence = ledgerFence
        let leftovers = flights.reset(
            adopting: adoptOrphan(
                identifier: identifier, refreshToken: adoptingOrphans ? credentials?.refreshToken : nil))
        base = StoredBase(revision: revision, refreshToken: credentials?.refreshToken)
        phase = .active(Identity(generation: generation, identifier: identifier, userInfo: userInfo))
        breaker = LoopBreaker()
        setCredentials(credentials)
        persistence.activated()
        recomputeDeadline()
        return leftovers
    }

    /// The session stops: no token is served, the flight in progress (if any) will be discarded. Returns the
    /// waiters to fail.
    mutating func deactivate() -> [Waiter] {
        if case .active(let identity) = phase { phase = .ended(identity) }
        let (flight, waiters) = flights.abandon()
        if let flight { orphan(flight) }
        nextActionAt = -.infinity
        return waiters
    }

    // MARK: - Hot path (synchronous)

    /// What a synchronous token request found.
    struct SyncOutcome {
        /// The token to hand out, or `nil` when the caller must take the asynchronous path.
        var token: String?
        var refresh: RefreshJob?
        var persist: PersistJob?
    }

    /// A token request at `now`, after the caller found `now >= nextActionAt`. Serves the token whenever it is
    /// still valid and no wait is required, starting a background refresh in the soft window and a write retry
    /// when one is due.
    mutating func tokenRequested(now: Double) -> SyncOutcome {
        guard active, !isTerminated, hasCredentials, now < expiresAt else { return SyncOutcome() }
        var outcome = SyncOutcome()
        outcome.persist = schedulePersistRetryIfDue(now: now)
        let leadStart = expiresAt - leadTime
        if now >= leadStart {
            // Inside the lead time: wait for a refresh (running, or to be started by the async path) when one is
            // possible; otherwise the still-valid token is the best there is.
            if flights.isRefreshing || canRefreshAutomatically(now: now) {
                recomputeDeadline()
                return outcome
            }
        } else if now >= expiresAt - softWindow, !flights.isRefreshing, canRefreshAutomatically(now: now) {
            outcome.refresh = startFlight(.background, now: now)
        }
        recomputeDeadline()
        outcome.token = token
        return outcome
    }

    // MARK: - Slow path (asynchronous callers)

    /// What an asynchronous request must do.
    enum Decision {
        /// Use these credentials now.
        case serve(Credentials)
        /// Wait for the refresh in flight; `start` is set when this request started it.
        case wait(start: RefreshJob?)
        /// Fail with `error`; `loopTripped` says the refresh-loop breaker refused a refresh.
        case fail(UserSessionError, loopTripped: Bool)
    }

    /// Decides what `request` at `now` must do. A `.wait` decision expects the caller to register with
    /// ``register(waiterID:continuation:)`` in the same critical section.
    mutating func decide(_ request: Request, now: Double) -> Decision {
        guard active else { return .fail(Self.notOpenError, loopTripped: false) }
        if let terminalError { return .fail(terminalError, loopTripped: false) }
        guard let credentials else {
            return .fail(UserSessionError(.credentialsUnusable, "the session has no credentials"), loopTripped: false)
        }
        let isValid = now < expiresAt
        switch request {
        case .forced(let replacing):
            if let replacing, replacing != credentials.accessToken { return .serve(credentials) }
            if flights.isRefreshing { return .wait(start: nil) }
            return startRequiredFlight(.forced, now: now)
        case .replay(let replacing, let owner):
            guard owner == generation else { return .fail(Self.replacedError, loopTripped: false) }
            return decide(.forced(replacing: replacing), now: now)
        case .minimumValidity(let validity):
            if expiresAt - now >= validity { return .serve(credentials) }
            if let lifetime, lifetime < validity { return .fail(Self.unreachableValidity, loopTripped: false) }
            if flights.isRefreshing { return .wait(start: nil) }
            if let refusal = backoffRefusal(now: now) { return refusal }
            return startRequiredFlight(.demand, now: now)
        case .restore:
            if isValid { return .serve(credentials) }
            if flights.isRefreshing { return .wait(start: nil) }
            return startRequiredFlight(.restore, now: now)
        case .demand:
            if now < expiresAt - leadTime { return .serve(credentials) }
            if flights.isRefreshing { return .wait(start: nil) }
            if isValid {
                // Inside the lead time with a valid token: refresh and wait if allowed now; during a backoff,
                // after a misconfiguration or with the breaker full, the valid token is served instead.
                guard canRefreshAutomatically(now: now) else {
                    recomputeDeadline()
                    return .serve(credentials)
                }
                return .wait(start: startFlight(.demand, now: now))
            }
            if let refusal = backoffRefusal(now: now) { return refusal }
            return startRequiredFlight(.demand, now: now)
        }
    }

    /// After a failed refresh, an expired token is not refreshed again before the backoff elapses: callers get the
    /// failure at once instead of hammering a token endpoint that is down.
    private func backoffRefusal(now: Double) -> Decision? {
        guard now < flights.retryAt, let backoff = flights.backoff else { return nil }
        return .fail(backoff.lastFailure, loopTripped: false)
    }

    /// Whether a token request (``Request/demand``) at `now` must wait for the refresh already in flight.
    ///
    /// This is the one decision every caller makes when many find the token expiring together, so it reads
    /// only plain fields (no copy of the credentials); it agrees with ``decide(_:now:)`` returning
    /// `.wait(start: nil)` for `.demand`.
    func demandJoinsFlight(now: Double) -> Bool {
        flights.isRefreshing && active && !isTerminated && hasCredentials && now >= expiresAt - leadTime
    }

    // MARK: - Helpers

    static let notOpenError = UserSessionError(.sessionNotOpen, "no session is open")

    static let replacedError = UserSessionError(
        .sessionNotOpen, "the session whose token the operation used was closed or replaced; it is not replayed")

    static let unreachableValidity = UserSessionError(
        .minimumValidityUnreachable, "the token endpoint issues tokens that live shorter than the validity asked for")

    private mutating func startRequiredFlight(_ kind: FlightKind, now: Double) -> Decision {
        guard hasRefresher else {
            let code: UserSessionError.Code = kind == .restore ? .credentialsUnusable : .noRefresher
            return .fail(
                UserSessionError(code, "a refresh is needed but no refresher is configured"), loopTripped: false)
        }
        guard credentials?.isRefreshable == true else {
            let code: UserSessionError.Code = kind == .restore ? .credentialsUnusable : .noRefresher
            return .fail(
                UserSessionError(code, "a refresh is needed but the credentials have no refresh token"),
                loopTripped: false)
        }
        guard breakerAllows(now: now) else {
            return .fail(
                UserSessionError(
                    .refreshLoop,
                    "more than \(policy.loopMaximum) refreshes within \(loopWindow) s; refresh refused"),
                loopTripped: true)
        }
        return .wait(start: startFlight(kind, now: now))
    }

    private mutating func startFlight(_ kind: FlightKind, now: Double) -> RefreshJob {
        guard let credentials else { preconditionFailure("a refresh needs credentials") }
        let id = flights.start(kind, now: now, sending: credentials.refreshToken)
        recomputeDeadline()
        return RefreshJob(
            flightID: id, generation: generation, credentials: credentials, kind: kind, identifier: identifier,
            userInfo: userInfo, ledgerFence: ledgerFence)
    }

    /// Whether a refresh may start on its own (soft window, lead time with a valid token).
    private mutating func canRefreshAutomatically(now: Double) -> Bool {
        hasRefresher && credentials?.isRefreshable == true && !flights.blocksAutomaticRefresh
            && now >= flights.retryAt
            && breakerAllows(now: now)
    }

    /// The refresh-loop breaker: at most `loopMaximum` successful refreshes within the loop window.
    private mutating func breakerAllows(now: Double) -> Bool {
        breaker.allows(now: now, window: loopWindow, maximum: policy.loopMaximum)
    }

    /// When the breaker lets the next refresh through, or `-infinity` if it does now.
    var breakerFreeAt: Double { breaker.freeAt(window: loopWindow, maximum: policy.loopMaximum) }
}
