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

extension RefreshStateMachine {
    /// One caller waiting for the refresh in flight. A cancelled waiter stays as a tombstone
    /// (`continuation == nil`) until the refresh completes, so ids stay sorted for binary search.
    struct Waiter {
        let id: UInt64
        var continuation: WaiterContinuation?
    }

    /// What a waiter is resumed with. `accessToken()` needs only the token: its continuation carries a `String`,
    /// which keeps the waiting task's async frames small (a parked caller costs no extra task-allocator slab) and
    /// makes resuming it one retain instead of a copy of the whole credentials.
    enum WaiterContinuation {
        case token(UnsafeContinuation<String, any Error>)
        case credentials(UnsafeContinuation<Credentials, any Error>)

        func resume(throwing error: any Error) {
            switch self {
            case .token(let continuation): continuation.resumeVisibly(throwing: error)
            case .credentials(let continuation): continuation.resumeVisibly(throwing: error)
            }
        }

        /// Resumes with `credentials`, or only their access token (`token`, the same value, copied once by the
        /// caller for all waiters).
        func resume(returning credentials: Credentials, token: String) {
            switch self {
            case .token(let continuation): continuation.resumeVisibly(returning: token)
            case .credentials(let continuation): continuation.resumeVisibly(returning: credentials)
            }
        }
    }

    /// Adds a waiter for the flight in progress (see ``FlightMachine/register(waiterID:continuation:)``).
    mutating func register(waiterID: UInt64, continuation: WaiterContinuation) {
        flights.register(waiterID: waiterID, continuation: continuation)
    }

    /// A waiter's task was cancelled: returns its continuation (to resume with `CancellationError`) if it is
    /// still waiting.
    mutating func cancelWaiter(id: UInt64) -> WaiterContinuation? {
        flights.cancelWaiter(id: id)
    }
}

/// The session's own data in ``RefreshStateMachine``: which session it serves, its credentials and what derives from
/// them, the loop breaker's memory and the stored record it is based on. Each is a value of its own, replaced or
/// changed through one `mutating func`, so the machine has no loose fields to keep in step.
extension RefreshStateMachine {
    /// Who a session is: its generation (one per open or restore), identifier and user info.
    struct Identity {
        let generation: UInt64
        let identifier: String
        let userInfo: UserInfo
    }

    /// Which session the machine serves.
    ///
    /// ```
    /// none ──activate──▶ active ──deactivate──▶ ended ──activate──▶ active
    /// ```
    enum Phase {
        /// No session was activated yet.
        case none
        /// Tokens are served to this session.
        indirect case active(Identity)
        /// This session ended: nothing is served; its credentials stay until the final flush has written them.
        indirect case ended(Identity)

        var identity: Identity? {
            switch self {
            case .none: nil
            case .active(let identity), .ended(let identity): identity
            }
        }
    }

    /// The current credentials with everything the machine derives from them, computed once when they change.
    struct Held {
        let credentials: Credentials?
        /// A copy of `credentials?.accessToken` for the hot path (empty without credentials).
        let token: String
        /// When they expire, in seconds since the reference date (`infinity` when unknown).
        let expiresAt: Double
        /// Expiry minus issue time, when both are known.
        let lifetime: Double?
        /// The lead time, soft window and loop-breaker window for these credentials: the policy's, scaled down to
        /// the lifetime when it is known.
        let leadTime: Double
        let softWindow: Double
        let loopWindow: Double

        /// Derives everything from `credentials`, whose lifetime counts from their ``Credentials/lastRefreshedAt``,
        /// or else from `issuedAt` (when the refresh that returned them started); without either it is unknown.
        ///
        /// A 300-s token inside a 300-s soft window would start a refresh at its first use, and every refresh the
        /// next one, until the loop breaker trips. So for a known lifetime `L` the lead time is at most `L / 10`,
        /// the soft window at most `L / 4` (a token is refreshed once, when about three quarters of its life have
        /// passed), and the breaker's window at most `max(L, 1 s)` (one refresh per lifetime is never a loop).
        /// Long-lived tokens keep the configured values; credentials of unknown lifetime use them too.
        init(_ credentials: Credentials?, issuedAt: Double? = nil, policy: Policy) {
            self.credentials = credentials
            token = credentials?.accessToken ?? ""
            let expiry = credentials?.expiresAt?.timeIntervalSinceReferenceDate ?? .infinity
            expiresAt = expiry
            let issued = credentials?.lastRefreshedAt?.timeIntervalSinceReferenceDate ?? issuedAt
            let lifetime = expiry.isFinite ? issued.map { expiry - $0 } : nil
            self.lifetime = lifetime
            guard let lifetime else {
                (leadTime, softWindow, loopWindow) = (policy.leadTime, policy.softWindow, policy.loopWindow)
                return
            }
            let span = max(0, lifetime)
            let lead = min(policy.leadTime, span * Policy.leadFraction)
            leadTime = lead
            softWindow = max(lead, min(policy.softWindow, span * Policy.softWindowFraction))
            loopWindow = min(policy.loopWindow, max(span, Policy.minimumLoopWindow))
        }
    }

    /// The refresh-loop breaker's memory: when the last successful refreshes happened, oldest first.
    struct LoopBreaker {
        private var successTimes: [Double] = []

        mutating func recordSuccess(at now: Double) {
            successTimes.append(now)
        }

        /// Whether fewer than `maximum` refreshes succeeded within `window` before `now`; forgets older ones.
        mutating func allows(now: Double, window: Double, maximum: Int) -> Bool {
            let horizon = now - window
            if let first = successTimes.first, first <= horizon { successTimes.removeAll { $0 <= horizon } }
            return successTimes.count < maximum
        }

        /// When the next refresh is allowed, or `-infinity` if it is now.
        func freeAt(window: Double, maximum: Int) -> Double {
            guard successTimes.count >= maximum else { return -.infinity }
            return successTimes[successTimes.count - maximum] + window
        }
    }

    /// For a ``CoordinatedTokenStore``: the stored record the active session's credentials were read from or last
    /// written as.
    struct StoredBase {
        /// Its revision; `nil` when unknown (a store without coordination).
        var revision: UInt64?
        /// Its refresh token, as far as this session knows: a conflicting write finding it still stored may write
        /// over that record, since it holds nothing newer.
        var refreshToken: String?
    }

    // MARK: - Reading the session's data

    var active: Bool {
        if case .active = phase { return true }
        return false
    }
    var generation: UInt64 { phase.identity?.generation ?? 0 }
    var identifier: String { phase.identity?.identifier ?? "" }
    var userInfo: UserInfo { phase.identity?.userInfo ?? UserInfo(id: "") }
    var credentials: Credentials? { held.credentials }
    var token: String { held.token }
    var expiresAt: Double { held.expiresAt }
    var lifetime: Double? { held.lifetime }
    var leadTime: Double { held.leadTime }
    var softWindow: Double { held.softWindow }
    var loopWindow: Double { held.loopWindow }
    var heldRevision: UInt64? { base.revision }

    /// Makes `credentials` current (the caller tells ``persistence`` whether they are stored).
    mutating func setCredentials(_ credentials: Credentials?, issuedAt: Double? = nil) {
        held = Held(credentials, issuedAt: issuedAt, policy: policy)
    }
}

/// The inputs ``CredentialsGate`` feeds the machine through its funnel
/// (``CredentialsGate/modifyStateAndRunActions(ordered:_:)``): one `mutating func` per thing that happened, each
/// returning the ``Actions`` it calls for (and a value where the gate needs one). They turn the machine's decisions
/// (``decide(_:now:)``, ``refreshFailed(flightID:error:now:jitter:)``, ``commit(flightID:newCredentials:persisted:now:jitter:)``, …),
/// which the unit tests check one by one, into what the gate performs.
extension RefreshStateMachine {
    // MARK: - Sessions

    /// A session opens (see ``activate(identifier:userInfo:credentials:generation:adoptingOrphans:revision:)``):
    /// waiters left from an earlier one fail.
    mutating func activated(
        identifier: String, userInfo: UserInfo, credentials: Credentials?, generation: UInt64, restoring: Bool,
        revision: UInt64?, ledgerFence: UInt64 = 0
    ) -> Actions {
        let leftovers = activate(
            identifier: identifier, userInfo: userInfo, credentials: credentials, generation: generation,
            adoptingOrphans: restoring, revision: revision, ledgerFence: ledgerFence)
        return .resume(leftovers, with: .failure(Self.notOpenError))
    }

    /// The opening write of a sign-in landed: the session's writes are taken under the ledger's new fence.
    mutating func signedIn(ledgerFence: UInt64) -> Actions {
        if active { self.ledgerFence = ledgerFence }
        return .none
    }

    /// The session was restored from an unwritten rotation the ledger held: the store must get it.
    mutating func unwrittenRotationAdopted(now: Double) -> Actions {
        guard active else { return .none }
        persistence.mustRewrite(now: now)
        return Actions(retry: schedulePersistRetryIfDue(now: now))
    }

    /// The session stops (see ``deactivate()``): its waiters fail.
    mutating func deactivated() -> Actions {
        .resume(deactivate(), with: .failure(Self.notOpenError))
    }

    /// Whether the session of `generation` is the active one.
    func isActive(generation: UInt64) -> Bool {
        active && self.generation == generation
    }

    // MARK: - Token requests

    /// A synchronous token request past ``nextActionAt`` (see ``tokenRequested(now:)``): the token, if it can be
    /// served, with the generation of its session.
    mutating func tokenAsked(now: Double) -> ((token: String?, generation: UInt64), Actions) {
        let outcome = tokenRequested(now: now)
        return ((outcome.token, generation), Actions(refresh: outcome.refresh, retry: outcome.persist))
    }

    /// A token request joins the refresh in flight when it must wait for it (``demandJoinsFlight(now:)``);
    /// returns whether it joined.
    mutating func joinFlight(now: Double, waiterID: UInt64, continuation: WaiterContinuation) -> (Bool, Actions) {
        guard demandJoinsFlight(now: now) else { return (false, .none) }
        register(waiterID: waiterID, continuation: continuation)
        return (true, .none)
    }

    /// An asynchronous `request` (see ``decide(_:now:)``): the caller is served or failed at once, or waits (a
    /// refresh starts when it is the first). Returns the generation it was decided for. A caller whose task is
    /// already `cancelled` gets `CancellationError`.
    mutating func requested(
        _ request: Request, now: Double, waiterID: UInt64, continuation: WaiterContinuation, cancelled: Bool
    ) -> (UInt64, Actions) {
        let generation = generation
        if cancelled { return (generation, Actions(caller: (continuation, .failure(CancellationError())))) }
        switch decide(request, now: now) {
        case .serve(let credentials):
            return (generation, Actions(caller: (continuation, .success(credentials))))
        case .wait(let job):
            register(waiterID: waiterID, continuation: continuation)
            return (generation, Actions(refresh: job))
        case .fail(let error, let loopTripped):
            let trip = loopTripped ? (generation, error.message) : nil
            return (generation, Actions(loopTripped: trip, caller: (continuation, .failure(error))))
        }
    }

    /// A waiter's task was cancelled: it gets `CancellationError`, if it is still waiting.
    mutating func waiterCancelled(id: UInt64) -> Actions {
        Actions(caller: cancelWaiter(id: id).map { ($0, .failure(CancellationError())) })
    }

    // MARK: - Flights

    /// The flight `flightID` is about to do its next step (announce itself, send its refresh token): whether it is
    /// still the session's. One that is not is forgotten, orphan or not: it has sent nothing. With `announcing`,
    /// a current one emits `.refreshStarted`.
    mutating func flightProceeds(flightID: UInt64, announcing: Bool) -> (Bool, Actions) {
        guard isCurrent(flightID: flightID) else {
            orphans.removeValue(forKey: flightID)
            return (false, .none)
        }
        return (true, announcing ? Actions(events: [.init(kind: .refreshStarted)]) : .none)
    }

    /// How a failed flight was reported.
    struct FailureReport {
        /// How many waiters got the failure.
        var waiters: Int
        /// The generation whose session the gate must invalidate (a terminal failure), if any.
        var invalidates: UInt64?
    }

    /// The refresh of `flightID` failed (see ``refreshFailed(flightID:error:now:jitter:)``): `.refreshFailed` is
    /// emitted and the waiters fail. `nil` for a stale flight: nothing is reported.
    mutating func flightFailed(flightID: UInt64, error: UserSessionError, now: Double, jitter: Double)
        -> (FailureReport?, Actions)
    {
        guard let failure = refreshFailed(flightID: flightID, error: error, now: now, jitter: jitter) else {
            return (nil, .none)
        }
        var actions = Actions.resume(failure.waiters, with: .failure(error))
        actions.events = [.init(kind: .refreshFailed(error.failureClass ?? .transient), detail: error.message)]
        let report = FailureReport(
            waiters: failure.waiters.count, invalidates: failure.notifyTerminal ? failure.generation : nil)
        return (report, actions)
    }

    /// Once the persistence slot is held for the commit of `flightID`: the active session's target (see
    /// ``commitTarget(flightID:newCredentials:)``), or else the orphan's (``orphanCommitTarget(flightID:newCredentials:)``).
    mutating func commitTargets(flightID: UInt64, newCredentials: Credentials)
        -> ((session: PersistTarget?, orphan: PersistTarget?), Actions)
    {
        if let target = commitTarget(flightID: flightID, newCredentials: newCredentials) {
            return ((target, nil), .none)
        }
        return ((nil, orphanCommitTarget(flightID: flightID, newCredentials: newCredentials)), .none)
    }

    /// The write of a refresh's credentials returned (`persistError` when it failed): publish them (see
    /// ``commit(flightID:newCredentials:persisted:now:jitter:)``), emit `.persistenceFailed` (and arm the retry)
    /// when the write failed, then `.credentialsRefreshed`, and resume the waiters. Returns how many there were,
    /// or `nil` when the flight became stale.
    mutating func flightCommitted(
        flightID: UInt64, newCredentials: Credentials, persistError: (any Error)?, now: Double, jitter: Double
    ) -> (Int?, Actions) {
        guard
            let commit = commit(
                flightID: flightID, newCredentials: newCredentials, persisted: persistError == nil, now: now,
                jitter: jitter)
        else { return (nil, .none) }
        var actions = Actions.resume(commit.waiters, with: .success(newCredentials))
        if let persistError {
            actions.events.append(.init(kind: .persistenceFailed, detail: Self.describePersistFailure(persistError)))
            actions.armRetryTimer = true
        }
        actions.events.append(.init(kind: .credentialsRefreshed))
        return (commit.waiters.count, actions)
    }

    // MARK: - Credentials from elsewhere

    /// Credentials handed over explicitly were written (see ``update(_:generation:)``): `.credentialsUpdated`, and
    /// the waiters of a superseded refresh get them.
    mutating func credentialsUpdated(_ credentials: Credentials, generation: UInt64) -> Actions {
        guard let update = update(credentials, generation: generation) else { return .none }
        var actions = Actions.resume(update.waiters, with: .success(credentials))
        actions.events = [.init(kind: .credentialsUpdated(update.change))]
        return actions
    }

    /// The session of `generation` adopts `record`, which another process stored (see ``adopt(_:generation:)``);
    /// returns whether it did.
    mutating func recordAdopted(_ record: RevisedSession, generation: UInt64) -> (Bool, Actions) {
        guard let adoption = adopt(record, generation: generation), let credentials = record.session.credentials
        else { return (false, .none) }
        var actions = Actions.resume(adoption.waiters, with: .success(credentials))
        actions.events = [.init(kind: .credentialsUpdated(adoption.change), detail: "adopted from the token store")]
        return (true, actions)
    }

    /// The session of `generation` found its record removed elsewhere (see ``clearedElsewhere(generation:)``): its
    /// waiters fail. Returns whether it was the active session (which the controller must then close).
    mutating func recordRemoved(generation: UInt64) -> (Bool, Actions) {
        guard let waiters = clearedElsewhere(generation: generation) else { return (false, .none) }
        return (true, .resume(waiters, with: .failure(Self.clearedElsewhereError)))
    }

    // MARK: - Writes

    /// A writer asks for the persistence slot: its ticket, and whether it holds the slot now (else it queues with
    /// ``PersistenceSlot/enqueue(ticket:continuation:)``).
    mutating func slotRequested() -> ((ticket: UInt64, granted: Bool), Actions) {
        let ticket = slot.makeTicket()
        return ((ticket, slot.tryAcquire(ticket: ticket)), .none)
    }

    /// `closeAndClear()` is about to remove `identifier`'s record (see ``beginClear(identifier:)``).
    mutating func clearBegun(identifier: String) -> Actions {
        beginClear(identifier: identifier)
        return .none
    }

    /// A write of `target` landed as `revision` in a coordinated store (see ``noteWritten(_:revision:)``).
    mutating func written(_ target: PersistTarget, revision: UInt64) -> Actions {
        noteWritten(target, revision: revision)
        return .none
    }

    /// The opening session's first write landed as `revision` (see ``noteOpeningRevision(_:identifier:)``).
    mutating func openingWritten(revision: UInt64, identifier: String) -> Actions {
        noteOpeningRevision(revision, identifier: identifier)
        return .none
    }

    /// Once the slot is held for a retry of the session of `generation`: what to write (see
    /// ``persistRetryTarget(generation:)``).
    mutating func retryTargetTaken(generation: UInt64) -> (PersistTarget?, Actions) {
        (persistRetryTarget(generation: generation), .none)
    }

    /// A retried write found a newer record in a coordinated store, which stands: the retry is dropped.
    mutating func retrySuperseded() -> Actions {
        persistence.retryDropped()
        return .none
    }

    /// Once the slot is held after `deactivate()`: the final flush's target (see ``takeFinalFlush()``).
    mutating func finalFlushTaken() -> (PersistTarget?, Actions) {
        (takeFinalFlush(), .none)
    }

    /// A write of `target` in the slot of `ticket` returned. If its slot had been taken away, its late landing is
    /// repaired (see ``repairLateWrite(_:now:)``).
    mutating func writeReturned(_ target: PersistTarget, ticket: UInt64, now: Double) -> Actions {
        guard slot.finishWrite(ticket: ticket) else { return .none }
        switch repairLateWrite(target, now: now) {
        case .none: return .none
        case .rewrite(let job): return Actions(retry: job)
        }
    }

    /// A retried write of `version` for the session of `generation` returned (see
    /// ``persistRetryFinished(generation:version:succeeded:now:jitter:)``); a failure is reported while that
    /// session is active, and the next retry armed.
    mutating func writeRetried(
        generation: UInt64, version: UInt64, error: (any Error)?, now: Double, jitter: Double
    ) -> Actions {
        persistRetryFinished(
            generation: generation, version: version, succeeded: error == nil, now: now, jitter: jitter)
        guard let error else { return .none }
        var actions = Actions(armRetryTimer: true)
        if isActive(generation: generation) {
            actions.events = [.init(kind: .persistenceFailed, detail: Self.describePersistFailure(error))]
        }
        return actions
    }

    static func describePersistFailure(_ error: any Error) -> String {
        if let error = error as? UserSessionError { return "writing credentials failed: \(error)" }
        return "writing credentials failed: \(String(describing: type(of: error)))"
    }
}

extension RefreshStateMachine {
    /// What to do after a refresh failed.
    struct FailureAction {
        var waiters: [Waiter]
        var error: UserSessionError
        /// The session's credentials were revoked: call the terminal-failure handler for `generation`.
        var notifyTerminal: Bool
        var generation: UInt64
    }

    /// The refresh of `flightID` failed with `error` (whose ``UserSessionError/failureClass`` is set). Returns
    /// `nil` when the flight is stale (the session was deactivated, replaced, or its credentials updated): then
    /// nothing is reported.
    mutating func refreshFailed(flightID: UInt64, error: UserSessionError, now: Double, jitter: Double)
        -> FailureAction?
    {
        guard isCurrent(flightID: flightID) else {
            // An orphan's failure is never reported: its session ended.
            orphans.removeValue(forKey: flightID)
            return nil
        }
        let failureClass = error.failureClass ?? .transient
        let policy = self.policy
        let (flight, waiters) = flights.failed(error, failureClass: failureClass, now: now) {
            policy.backoff(attempt: $0, jitter: jitter)
        }
        // A restore is still deciding whether to open at all; it throws instead of invalidating.
        let notifyTerminal = failureClass == .terminal && flight.kind != .restore
        recomputeDeadline()
        return FailureAction(waiters: waiters, error: error, notifyTerminal: notifyTerminal, generation: generation)
    }

    /// Whether the result of `flightID` would still be used.
    func isCurrent(flightID: UInt64) -> Bool {
        active && flights.isCurrent(flightID)
    }

    /// The refresh of `flightID` returned new credentials and the persistence slot is held: what to write, or
    /// `nil` when the flight became stale (then nothing is written).
    mutating func commitTarget(flightID: UInt64, newCredentials: Credentials) -> PersistTarget? {
        guard isCurrent(flightID: flightID) else { return nil }
        // From here on the write belongs to the session even if it deactivates before the write returns: the
        // server has already rotated the refresh token, so these credentials must reach the store one way or
        // another (see `commit`).
        persistence.beginCommit(flightID: flightID)
        return target(newCredentials, version: persistence.version + 1)
    }

    /// What to do after new credentials were committed.
    struct CommitAction {
        var waiters: [Waiter]
        var persistenceFailed: Bool
    }

    /// The write of a refresh's credentials finished (`persisted` says whether it succeeded): publish them.
    /// Returns `nil` when the flight became stale during the write (its waiters were already failed).
    mutating func commit(flightID: UInt64, newCredentials: Credentials, persisted: Bool, now: Double, jitter: Double)
        -> CommitAction?
    {
        let wroteForThisSession = persistence.endCommit(flightID: flightID)
        guard isCurrent(flightID: flightID) else {
            // The session deactivated while the write was in progress (`deactivate()` waits for it). If the write
            // failed, hand the credentials to `deactivate()`'s final flush rather than drop the rotated token.
            if wroteForThisSession, !persisted, !active {
                setCredentials(newCredentials)
                persistence.keepForFinalFlush()
            }
            return nil
        }
        let (flight, waiters) = flights.succeeded()
        setCredentials(newCredentials, issuedAt: flight.startedAt)
        breaker.recordSuccess(at: now)
        let policy = self.policy
        persistence.published(written: persisted, now: now) { policy.backoff(attempt: $0, jitter: jitter) }
        recomputeDeadline()
        return CommitAction(waiters: waiters, persistenceFailed: !persisted)
    }

    // MARK: - Credentials from elsewhere

    /// What to do after ``UserSessionController/updateCredentials(_:)`` published new credentials.
    struct UpdateAction {
        var change: UserSessionEvent.CredentialsChange
        /// Waiters of a refresh that was superseded; they get the new credentials.
        var waiters: [Waiter]
    }

    /// The identity the update must be written under, when a session of this generation is active.
    func updateTarget(_ newCredentials: Credentials) -> (generation: UInt64, target: PersistTarget)? {
        guard active else { return nil }
        return (generation, target(newCredentials, version: persistence.version + 1))
    }

    /// Publishes credentials obtained elsewhere (already written to the store). A refresh in flight is
    /// superseded: its result will be discarded and its waiters get these credentials.
    mutating func update(_ newCredentials: Credentials, generation: UInt64) -> UpdateAction? {
        guard active, self.generation == generation else { return nil }
        let old = credentials
        let oldExpiry = expiresAt
        setCredentials(newCredentials)
        persistence.publishedStored()
        let waiters = flights.reset()
        recomputeDeadline()
        let oldGranted = old?.grantedPermissions ?? []
        let change = UserSessionEvent.CredentialsChange(
            extended: expiresAt > oldExpiry,
            addedPermissions: newCredentials.grantedPermissions.subtracting(oldGranted),
            removedPermissions: oldGranted.subtracting(newCredentials.grantedPermissions))
        return UpdateAction(change: change, waiters: waiters)
    }
}

extension RefreshStateMachine {
    /// A write the gate must make once it holds the persistence slot.
    struct PersistJob: Equatable {
        let generation: UInt64
    }

    /// What to write, captured under the lock once the persistence slot is held.
    struct PersistTarget {
        let identifier: String
        let stored: StoredSession
        let version: UInt64
        /// The session the write belongs to.
        let generation: UInt64
        /// ``clearEpoch`` when the target was taken: a clear since then makes a late landing of it undone.
        let epoch: UInt64
        /// For a ``CoordinatedTokenStore``: the revision the write is conditional on (`nil`: a plain save).
        var baseRevision: UInt64? = nil
        /// The refresh token of the record at ``baseRevision``, as far as the session knows.
        var baseRefreshToken: String? = nil
        /// The ledger's sign-out fence the write is taken under: a sign-out of the identifier since makes the
        /// ledger refuse it (or undo it when it lands late).
        var ledgerFence: UInt64 = 0
    }

    /// A target for the active session's record.
    func target(_ credentials: Credentials, version: UInt64) -> PersistTarget {
        PersistTarget(
            identifier: identifier, stored: StoredSession(userInfo: userInfo, credentials: credentials),
            version: version, generation: generation, epoch: persistence.epoch, baseRevision: heldRevision,
            baseRefreshToken: base.refreshToken, ledgerFence: ledgerFence)
    }

    /// After `deactivate()`, once the persistence slot is held: the one last write of credentials that could not
    /// be stored before, if any. Clears them from memory.
    mutating func takeFinalFlush() -> PersistTarget? {
        guard !active else { return nil }
        defer { setCredentials(nil) }
        guard let version = persistence.takeFinalFlush(), let credentials else { return nil }
        return target(credentials, version: version)
    }

    // MARK: - Refreshes that outlive their session

    /// A refresh still running for a session that ended while keeping its stored record (`close()`, a replaced
    /// session, a cancelled or failed restore). Its result is never served, published or announced, but the
    /// server has already rotated the refresh token it sent, so its credentials are written to that session's
    /// own record — unless a `closeAndClear()` came since (``epoch``), or a newer session of the same identifier
    /// took the record over. A session restored from the record it sent adopts it instead (see ``activate``).
    struct Orphan {
        let identifier: String
        let userInfo: UserInfo
        let epoch: UInt64
        let flight: Flight
        /// The revision and refresh token of the record the session was based on: a late write is conditional on
        /// them, so it never recreates a record removed or replaced elsewhere.
        var baseRevision: UInt64?
        var baseRefreshToken: String?
        /// The ledger fence of the session: a sign-out of the identifier since (from anywhere) fences the write.
        var ledgerFence: UInt64 = 0
    }

    /// Keeps `flight` of the session that is ending as an orphan.
    mutating func orphan(_ flight: Flight) {
        orphans[flight.id] = Orphan(
            identifier: identifier, userInfo: userInfo, epoch: persistence.epoch, flight: flight,
            baseRevision: heldRevision, baseRefreshToken: base.refreshToken, ledgerFence: ledgerFence)
    }

    /// A session of `identifier` activates with `refreshToken`: an orphan refresh that sent that same refresh token
    /// becomes its flight (so it is not refreshed a second time with a token the server already rotated); other
    /// orphans of the identifier are dropped, since the new session now owns the record.
    mutating func adoptOrphan(identifier: String, refreshToken: String?) -> Flight? {
        guard !orphans.isEmpty else { return nil }
        var adopted: Flight?
        for (id, orphan) in orphans where ExactIdentifier.areEqual(orphan.identifier, identifier) {
            orphans.removeValue(forKey: id)
            if let refreshToken, orphan.flight.sentRefreshToken == refreshToken, adopted.map({ $0.id < id }) ?? true {
                adopted = orphan.flight
            }
        }
        return adopted
    }

    /// Once the persistence slot is held: where an orphan refresh's credentials go, or `nil` when they must not be
    /// written (cleared since, or taken over). Forgets the orphan either way.
    mutating func orphanCommitTarget(flightID: UInt64, newCredentials: Credentials) -> PersistTarget? {
        // Fenced per identifier by the ledger (``CredentialsLedger/writeBegins(_:fence:)``), not by this machine's
        // epoch: a clear of another identifier in this controller must not drop this user's rotation.
        guard let orphan = orphans.removeValue(forKey: flightID) else { return nil }
        return PersistTarget(
            identifier: orphan.identifier,
            stored: StoredSession(userInfo: orphan.userInfo, credentials: newCredentials), version: 0,
            generation: 0, epoch: persistence.epoch, baseRevision: orphan.baseRevision,
            baseRefreshToken: orphan.baseRefreshToken, ledgerFence: orphan.ledgerFence)
    }

    // MARK: - The clear fence

    /// `closeAndClear()` is about to remove `identifier`'s record (the session is already deactivated): no write
    /// taken before this point may land afterwards. Orphans of it are dropped, and any write whose target was
    /// taken before and lands late (a store that overran the close's deadline) is undone (``repairLateWrite(_:now:)``).
    mutating func beginClear(identifier: String) {
        persistence.fence()
        orphans = orphans.filter { !ExactIdentifier.areEqual($0.value.identifier, identifier) }
    }

    /// What a write that landed after its slot was taken away must do to repair the order of writes.
    enum WriteRepair: Equatable {
        case none
        /// Write the active session's newest credentials again: the write landed after a newer one.
        case rewrite(PersistJob)
    }

    /// A write of `target` whose slot ``PersistenceSlot/abandon()`` took away returned: what its late landing
    /// must repair.
    mutating func repairLateWrite(_ target: PersistTarget, now: Double) -> WriteRepair {
        let ownsRecord = active && ExactIdentifier.areEqual(identifier, target.identifier)
        if ownsRecord, generation != target.generation || target.epoch != persistence.epoch {
            // A newer session of this identifier may have written since: write its credentials again, now.
            persistence.mustRewrite(now: now)
            return schedulePersistRetryIfDue(now: now).map { .rewrite($0) } ?? .none
        }
        // A late write of a record this session does not own is the ledger's to repair: it knows whether that
        // identifier signed out since (``CredentialsLedger/writeFinished(_:fence:wrote:revision:schedule:)``).
        return .none
    }

    // MARK: - Retries

    /// Starts a retry of a failed write when one is due.
    mutating func schedulePersistRetryIfDue(now: Double) -> PersistJob? {
        guard active, persistence.retryIfDue(now: now) else { return nil }
        return PersistJob(generation: generation)
    }

    /// When the background retry timer should fire for the active session, if a write is waiting for one.
    var pendingRetryAt: Double? {
        guard active else { return nil }
        return persistence.pendingRetryAt
    }

    /// Once the slot is held for a retry: what to write (always the newest credentials), or `nil` if nothing is
    /// left to write for `generation`.
    mutating func persistRetryTarget(generation: UInt64) -> PersistTarget? {
        guard self.generation == generation else {
            recomputeDeadline()
            return nil
        }
        guard active, let credentials, let version = persistence.retryTarget() else {
            persistence.retryDropped()
            recomputeDeadline()
            return nil
        }
        return target(credentials, version: version)
    }

    /// A retried write of `version` finished.
    mutating func persistRetryFinished(
        generation: UInt64, version: UInt64, succeeded: Bool, now: Double, jitter: Double
    ) {
        guard self.generation == generation else { return }
        let policy = self.policy
        persistence.retryFinished(written: version, succeeded: succeeded, now: now) {
            policy.backoff(attempt: $0, jitter: jitter)
        }
        recomputeDeadline()
    }
}

/// The rules for a ``CoordinatedTokenStore``: which revision of the record the session holds, and adopting
/// credentials that another process put in the store.
extension RefreshStateMachine {
    /// A write of `target` landed as `revision` (a conditional write, or the overwrite of an opening session):
    /// when it was the active session's, that revision and its refresh token are now what the session holds.
    mutating func noteWritten(_ target: PersistTarget, revision: UInt64) {
        guard active, generation == target.generation, ExactIdentifier.areEqual(identifier, target.identifier)
        else { return }
        base = StoredBase(
            revision: max(base.revision ?? 0, revision), refreshToken: target.stored.credentials?.refreshToken)
    }

    /// The opening session's first write landed as `revision`.
    mutating func noteOpeningRevision(_ revision: UInt64, identifier: String) {
        guard active, ExactIdentifier.areEqual(self.identifier, identifier) else { return }
        base = StoredBase(revision: revision, refreshToken: credentials?.refreshToken)
    }

    /// The session's record was removed from the coordinated store by someone else: the session of `generation`
    /// stops refreshing (its controller closes it) and writes nothing back; the flight in progress, if any, is
    /// dropped. Returns the waiters to fail, or `nil` when that session is not the active one.
    mutating func clearedElsewhere(generation: UInt64) -> [Waiter]? {
        guard active, self.generation == generation else { return nil }
        let waiters = flights.terminate(Self.clearedElsewhereError)
        persistence.discard()
        recomputeDeadline()
        return waiters
    }

    static let clearedElsewhereError = UserSessionError(
        .sessionNotOpen, "the session's stored record was removed elsewhere; the session is closing")

    /// Whether `record`, read from the store for the active session of `generation`, holds credentials that
    /// replace the ones the session holds: a newer revision with other credentials than `held`.
    func storeIsNewer(_ record: RevisedSession, than held: Credentials?, generation: UInt64) -> Bool {
        guard active, self.generation == generation, let stored = record.session.credentials else { return false }
        if let heldRevision, record.revision <= heldRevision { return false }
        return stored != held
    }

    /// Publishes the credentials of `record` (already in the store) for the session of `generation`, without a
    /// refresh: another process rotated them. A refresh in flight is superseded (its waiters get these
    /// credentials). Returns `nil` when the session is not that one any more or the record is not newer than what
    /// the session holds (then nothing changes).
    mutating func adopt(_ record: RevisedSession, generation: UInt64) -> UpdateAction? {
        guard storeIsNewer(record, than: credentials, generation: generation),
            let newCredentials = record.session.credentials
        else { return nil }
        guard var action = update(newCredentials, generation: generation) else { return nil }
        if record.revision > 0 { base.revision = record.revision }
        base.refreshToken = newCredentials.refreshToken
        action.change.adoptedFromStore = true
        return action
    }

    /// The fallback for stores without coordination: a refresh of `flightID` that sent `sent` was refused as
    /// `invalid_grant`, and the store holds `stored` under `identifier`. Whether `stored` may take over: it has a
    /// refresh token other than the one sent (another process rotated it within the server's reuse grace period),
    /// and the flight is still the session's, whose identifier is still `identifier`.
    func mayRetryWithStored(flightID: UInt64, identifier: String, sent: Credentials, stored: Credentials) -> Bool {
        guard isCurrent(flightID: flightID), ExactIdentifier.areEqual(self.identifier, identifier) else { return false }
        return stored.refreshToken != nil && stored.refreshToken != sent.refreshToken
    }
}

extension RefreshStateMachine {
    /// The capped exponential backoff with "equal jitter"; see ``Policy/backoff(attempt:jitter:)``.
    func backoff(attempt: Int, jitter: Double) -> Double {
        policy.backoff(attempt: attempt, jitter: jitter)
    }

    /// Recomputes ``nextActionAt`` from everything that can require action.
    mutating func recomputeDeadline() {
        guard active, !isTerminated, hasCredentials else {
            nextActionAt = -.infinity
            return
        }
        var deadline = Double.infinity
        if expiresAt.isFinite {
            let leadStart = expiresAt - leadTime
            if flights.isRefreshing {
                deadline = leadStart
            } else if hasRefresher, credentials?.isRefreshable == true, !flights.blocksAutomaticRefresh {
                let softStart = expiresAt - softWindow
                deadline = min(max(softStart, flights.retryAt, breakerFreeAt), expiresAt)
            } else {
                deadline = expiresAt
            }
        }
        if let retryAt = persistence.pendingRetryAt { deadline = min(deadline, retryAt) }
        nextActionAt = deadline
    }
}

extension RefreshStateMachine.Policy {
    /// The capped exponential backoff with "equal jitter": half the delay fixed, half random.
    func backoff(attempt: Int, jitter: Double) -> Double {
        let exponent = Double(min(max(attempt - 1, 0), 62))
        let delay = min(maximumRetryDelay, initialRetryDelay * pow(2, exponent))
        return delay / 2 + delay / 2 * min(max(jitter, 0), 1)
    }
}

extension RefreshStateMachine {
    /// What the gate must do after an input, once it has released the lock: resume callers, start background
    /// work, hand the persistence slot on, emit events. Built under the lock, performed by
    /// ``CredentialsGate/run(_:)`` outside it, in the order of its fields.
    ///
    /// The two calls up to the controller (a terminal failure invalidates the session; a record removed elsewhere
    /// closes it) are asynchronous: an input returns them as its value and the gate awaits them after the actions.
    struct Actions {
        /// An event to emit.
        struct Event {
            let kind: UserSessionEvent.Kind
            var detail: String?
        }

        /// The persistence slot changed hands: resume its new holder.
        var slot = PersistenceSlot.Action.none
        /// The refresh-loop breaker refused a refresh of the session of `generation`: report it (before the caller
        /// gets the error), if that session is still active.
        var loopTripped: (generation: UInt64, detail: String)?
        /// Events of the transition, emitted in this order (before any caller or waiter is resumed).
        var events: [Event] = []
        /// One caller decided at once (served, failed, or cancelled), with its result.
        var caller: (continuation: WaiterContinuation, result: Result<Credentials, any Error>)?
        /// Waiters of a refresh that ended, resumed in arrival order with `waitersResult`.
        var waiters: [Waiter] = []
        var waitersResult: Result<Credentials, any Error> = .failure(RefreshStateMachine.notOpenError)
        /// A refresh to start in the background.
        var refresh: RefreshJob?
        /// A retry of a failed write to start in the background.
        var retry: PersistJob?
        /// A write failed: arm the timer that retries it when its backoff elapses.
        var armRetryTimer = false
        /// A record to remove again: a write left behind by a close landed after the clear.
        var removeAgain: String?

        static var none: Actions { Actions() }

        /// Resume `waiters` with `result`.
        static func resume(_ waiters: [Waiter], with result: Result<Credentials, any Error>) -> Actions {
            Actions(waiters: waiters, waitersResult: result)
        }
    }
}
