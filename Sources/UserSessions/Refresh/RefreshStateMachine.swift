import Foundation

/// The refresh rules of one session's credentials, as a pure state machine.
///
/// ``CredentialsGate`` holds it in a `Locked`, feeds it inputs (a token request, a refresh that returned, a write
/// that finished, …) and performs the actions it returns (start a refresh, write to the store, emit events, resume
/// waiters) after releasing the lock. Nothing here suspends, reads a clock or calls user code: the time and the
/// jitter come in as arguments, so every transition can be tested synchronously.
///
/// It keeps the session's own data (identity, credentials, the hot path's ``token`` and ``nextActionAt``, the
/// windows scaled to the token's lifetime, the loop breaker) and composes ``FlightMachine`` (the refresh in progress
/// and its backoff). Who may write now (the identifier's write turn), whether the store has the newest credentials,
/// and retrying a write it refused belong to the ledger (``CredentialsLedger``), the one owner of the identifier's
/// credentials.
///
/// Its inputs are named after what happened (`activated`, `tokenAsked`, `credentialsAsked`, `refreshReturned`,
/// `commitWritten`, `refreshFailed`, `recordWritten`, `signedOut`, …): one `mutating func` per transition, the only
/// entry point of that transition, each returning the ``Actions`` the gate performs. The rules they apply are
/// private to them; the other members are reads.
///
/// Times are seconds since the reference date (`Double`), the cheap form the hot path compares.
struct RefreshStateMachine {
    /// The refresh settings, as plain seconds (the cheap form the machine compares), normalized once.
    ///
    /// Built by the controller from its configuration (``UserSessionController/Configuration/refreshPolicy``);
    /// the machine knows nothing of the configuration itself.
    ///
    /// A class, immutable once made: every machine of a controller (and every controller of a registry) refers to
    /// the one made from the configuration, so an idle session keeps a reference, not a copy of six numbers.
    final class Policy: Sendable {
        let leadTime: Double
        let softWindow: Double
        let initialRetryDelay: Double
        let maximumRetryDelay: Double
        let loopMaximum: Int
        let loopWindow: Double

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
            let lead = max(0, leadTime.seconds)
            let initialDelay = max(0.001, initialRetryDelay.seconds)
            self.leadTime = lead
            self.softWindow = max(lead, softWindow.seconds)
            self.initialRetryDelay = initialDelay
            self.maximumRetryDelay = max(initialDelay, maximumRetryDelay.seconds)
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
        /// The fence that session holds the identifier under (``RefreshStateMachine/heldFence``): the ledger lets the
        /// refresh lead only on the entry that fence was taken from.
        var heldFence: UInt64 = 0
    }

    typealias Flight = FlightMachine.Flight

    let policy: Policy

    // MARK: Session

    /// Which session the machine serves, if any (see ``Phase``).
    private(set) var phase = Phase.none
    /// The generation of ``phase``'s session (0 before the first), set with it and kept beside it, not in it: the hot
    /// path reads it at every call, and reading it out of the phase would copy the session's identity (its strings)
    /// each time.
    private(set) var generation: UInt64 = 0
    /// The session's credentials with what derives from them: the hot path's token, the expiry, the lead time and
    /// windows scaled to their lifetime (see ``Held``). Replaced as a whole when the credentials change.
    private(set) var held: Held
    /// The hot path serves ``Held/token`` without looking at anything else while `now < nextActionAt`.
    ///
    /// It is the earliest moment something must happen: the soft window opens (after any backoff), the lead time
    /// starts, or the token expires. `-infinity` when no token may be served.
    private(set) var nextActionAt = -Double.infinity

    // MARK: Refresh

    /// The refresh in progress and what past failures left (see ``FlightMachine``).
    private(set) var flights = FlightMachine()
    /// Whether the gate has a refresher: without one, nothing is ever refreshed. The three flags follow the flight
    /// machine, in the word its last byte (a running flight's kind) leaves.
    let hasRefresher: Bool
    /// Whether the active session's sign-in has not landed yet: until it does, its writes are taken under
    /// ``signingInFence`` (see ``heldFence``).
    private(set) var signingIn = false
    /// Whether the store coordinates refreshes (a ``CoordinatedTokenStore``): only then is ``base`` kept.
    let coordinated: Bool
    /// The refresh-loop breaker: when the last successful refreshes happened (see ``LoopBreaker``).
    private(set) var breaker = LoopBreaker()

    // MARK: Persistence

    /// The ledger fence the active session holds its identifier under: its hold's when it was activated, then the one
    /// its own sign-in made (see ``CredentialsLedger``). A refresh of the session may lead only on the ledger entry
    /// this fence was taken from, never on one made after the session let the identifier go.
    private(set) var heldFence: UInt64 = 0
    /// The fence every write of the active session is taken under: ``heldFence``, or ``signingInFence`` while its
    /// sign-in has not landed.
    var ledgerFence: UInt64 { signingIn ? Self.signingInFence : heldFence }

    // MARK: Coordination (a ``CoordinatedTokenStore``)

    /// The stored record the active session's credentials were read from or last written as (see
    /// ``StoredBase``); none for a store without coordination, whose writes are not conditional on a record: an idle
    /// session of such a store keeps one word for it.
    private(set) var base: StoredBase?

    init(policy: Policy, hasRefresher: Bool, coordinated: Bool = false) {
        self.policy = policy
        self.hasRefresher = hasRefresher
        self.coordinated = coordinated
        held = Held(nil, policy: policy)
    }

    /// The record the session holds is now of `revision` (`nil`: unknown) with `refreshToken`; kept only over a
    /// coordinated store.
    private mutating func setBase(revision: UInt64?, refreshToken: String?) {
        guard coordinated else { return }
        base = StoredBase(revision: revision, refreshToken: refreshToken)
    }

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
}

/// The inputs ``CredentialsGate`` feeds the machine through its funnel
/// (``CredentialsGate/modifyStateAndRunActions(ordered:_:)``). Each is named after what happened, is the one entry
/// point of its transition, and returns the ``Actions`` it calls for (with a value where the gate needs one); the
/// rules behind it are private to it. The unit tests feed the same inputs and check the actions and the state.
extension RefreshStateMachine {
    // MARK: - Sessions

    /// A session of `generation` opened with `credentials` (read from a coordinated store's record of revision
    /// `revision`, for a restore), holding its identifier in the ledger under `heldFence`, and `signingIn` when its
    /// sign-in has yet to land. Waiters left from a previous session (only if the gate
    /// skipped ``deactivated()``) fail with ``UserSessionError/Code/sessionNotOpen``.
    ///
    /// A refresh of an earlier session still running is not this session's: its rotation is the ledger's to write,
    /// and a session presenting the same refresh token joins it there (it is not sent a second time).
    mutating func activated(
        identifier: String, userInfo: UserInfo, credentials: Credentials?, generation: UInt64,
        revision: UInt64? = nil, heldFence: UInt64 = 0, signingIn: Bool = false
    ) -> Actions {
        self.heldFence = heldFence
        self.signingIn = signingIn
        let leftovers = flights.credentialsChanged()
        setBase(revision: revision, refreshToken: credentials?.refreshToken)
        self.generation = generation
        phase = .active(Identity(identifier: identifier, userInfo: userInfo))
        breaker = LoopBreaker()
        setCredentials(credentials)
        recomputeDeadline()
        return .resume(leftovers, with: .failure(Self.notOpenError))
    }

    /// The fence of a session whose sign-in has not landed yet: it matches no fence of the ledger, so nothing the
    /// session refreshes before then is written unless the sign-in lands
    /// (``signedIn(identifier:revision:ledgerFence:)`` gives it the fence the sign-in made, and the ledger writes a
    /// rotation of the signed-in credentials it already knows). An open whose first write failed leaves nothing to
    /// write.
    static let signingInFence: UInt64 = 0

    /// The opening write of a sign-in landed (as `revision` in a coordinated store) and the ledger renewed the
    /// identifier's fence: the session's writes are taken under `ledgerFence`, and the session holds that revision.
    mutating func signedIn(identifier: String, revision: UInt64?, ledgerFence: UInt64) -> Actions {
        guard active else { return .none }
        if let revision, ExactIdentifier.areEqual(self.identifier, identifier) {
            setBase(revision: revision, refreshToken: credentials?.refreshToken)
        }
        heldFence = ledgerFence
        signingIn = false
        return .none
    }

    /// The session stopped: no token is served, its waiters fail, and the flight in progress (if any) is no longer
    /// the session's: its result is never served, and its rotation is the ledger's to write.
    mutating func deactivated() -> Actions {
        if case .active(let identity) = phase { phase = .ended(identity) }
        let (_, waiters) = flights.sessionEnded()
        nextActionAt = -.infinity
        return .resume(waiters, with: .failure(Self.notOpenError))
    }

    /// Whether the session of `generation` is the active one.
    func isActive(generation: UInt64) -> Bool {
        active && self.generation == generation
    }

    // MARK: - Token requests

    /// A synchronous token request at `now`, after the caller found `now >= nextActionAt`: the token, if it can be
    /// served without waiting, with the generation of its session. Serves it whenever it is still valid and no
    /// wait is required; starts a background refresh in the soft window.
    mutating func tokenAsked(now: Double) -> ((token: String?, generation: UInt64), Actions) {
        guard active, !isTerminated, hasCredentials, now < expiresAt else { return ((nil, generation), .none) }
        var actions = Actions.none
        let leadStart = expiresAt - leadTime
        if now >= leadStart {
            // Inside the lead time: wait for a refresh (running, or to be started by the async path) when one is
            // possible; otherwise the still-valid token is the best there is.
            if flights.isRefreshing || canRefreshAutomatically(now: now) {
                recomputeDeadline()
                return ((nil, generation), actions)
            }
        } else if now >= expiresAt - softWindow, !flights.isRefreshing, canRefreshAutomatically(now: now) {
            actions.refresh = startFlight(.background, now: now)
        }
        recomputeDeadline()
        return ((token, generation), actions)
    }

    /// An asynchronous token request (``Request/demand``) arrived: `waiter` joins the refresh in flight when it
    /// must wait for it (``demandJoinsFlight(now:)``). Returns whether it joined; one that did not is decided by
    /// ``credentialsAsked(_:now:waiter:cancelled:)``.
    mutating func tokenAwaited(now: Double, waiter: Waiter) -> (Bool, Actions) {
        guard demandJoinsFlight(now: now) else { return (false, .none) }
        flights.waiterJoined(waiter)
        return (true, .none)
    }

    /// An asynchronous `request` arrived from `waiter`: it is served or failed at once, or waits for a refresh (one
    /// starts when it is the first). Returns the generation it was decided for. A caller whose task is already
    /// `cancelled` gets `CancellationError`.
    ///
    /// - ``Request/demand``: the token outside the lead time; inside it, a refresh (waiting) when one may start,
    ///   else the still-valid token; an expired token waits for a refresh, or fails with the last failure during a
    ///   backoff.
    /// - ``Request/forced(replacing:)``: a refresh, unless `replacing` is no longer the current token.
    /// - ``Request/replay(replacing:generation:)``: the same, for the session of that generation only.
    /// - ``Request/minimumValidity(_:)``: the token if it stays valid that long; fails at once if the credentials'
    ///   lifetime is shorter.
    /// - ``Request/restore``: the credentials unless they are expired.
    ///
    /// A refresh that is needed fails without a refresher or a refresh token, and with the breaker full
    /// (``Actions/loopTripped`` is then set).
    mutating func credentialsAsked(_ request: Request, now: Double, waiter: Waiter, cancelled: Bool)
        -> (UInt64, Actions)
    {
        let generation = generation
        if cancelled { return (generation, Actions(caller: (waiter.continuation, .failure(CancellationError())))) }
        switch decide(request, now: now) {
        case .serve(let credentials):
            return (generation, Actions(caller: (waiter.continuation, .success(credentials))))
        case .wait(let job):
            flights.waiterJoined(waiter)
            return (generation, Actions(refresh: job))
        case .fail(let error, let loopTripped):
            let trip = loopTripped ? (generation, error.message) : nil
            return (generation, Actions(loopTripped: trip, caller: (waiter.continuation, .failure(error))))
        }
    }

    /// A waiter's task was cancelled: it gets `CancellationError`, if it is still waiting. It leaves a tombstone,
    /// so the waiters stay sorted by id.
    mutating func waiterCancelled(id: UInt64) -> Actions {
        Actions(caller: flights.waiterCancelled(id: id).map { ($0, .failure(CancellationError())) })
    }

    /// Whether a token request (``Request/demand``) at `now` must wait for the refresh already in flight.
    ///
    /// This is the one decision every caller makes when many find the token expiring together, so it reads
    /// only plain fields (no copy of the credentials); it agrees with
    /// ``credentialsAsked(_:now:waiter:cancelled:)`` joining the flight without starting one.
    func demandJoinsFlight(now: Double) -> Bool {
        flights.isRefreshing && active && !isTerminated && hasCredentials && now >= expiresAt - leadTime
    }

    // MARK: - Deciding a request

    /// What an asynchronous request must do.
    private enum Decision {
        /// Use these credentials now.
        case serve(Credentials)
        /// Wait for the refresh in flight; `start` is set when this request started it.
        case wait(start: RefreshJob?)
        /// Fail with `error`; `loopTripped` says the refresh-loop breaker refused a refresh.
        case fail(UserSessionError, loopTripped: Bool)
    }

    /// The rules of ``credentialsAsked(_:now:waiter:cancelled:)``.
    private mutating func decide(_ request: Request, now: Double) -> Decision {
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
            if lifetime < validity { return .fail(Self.unreachableValidity, loopTripped: false) }
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
        let id = flights.started(kind, now: now)
        recomputeDeadline()
        return RefreshJob(
            flightID: id, generation: generation, credentials: credentials, kind: kind, identifier: identifier,
            userInfo: userInfo, ledgerFence: ledgerFence, heldFence: heldFence)
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
    private var breakerFreeAt: Double { breaker.freeAt(window: loopWindow, maximum: policy.loopMaximum) }
}

extension RefreshStateMachine {
    /// One caller of an asynchronous request, by id, and the continuation that resumes it. While it waits for the
    /// refresh in flight, a cancelled waiter stays as a tombstone (`continuation == nil`) until the refresh
    /// completes, so ids stay sorted for binary search.
    typealias Waiter = FlightWaiters<ParkedCaller>.Waiter

    /// What a waiter is resumed with. `accessToken()` needs only the token: its parked caller takes a `String`,
    /// which keeps the waiting task's async frames small (a parked caller costs no extra task-allocator slab) and
    /// makes resuming it one retain instead of a copy of the whole credentials.
    enum ParkedCaller {
        case token(Parked<String, any Error>)
        case credentials(Parked<Credentials, any Error>)

        func resume(throwing error: any Error) {
            switch self {
            case .token(let caller): caller.resume(throwing: error)
            case .credentials(let caller): caller.resume(throwing: error)
            }
        }

        /// Resumes with `credentials`, or only their access token (`token`, the same value, copied once by the
        /// caller for all waiters).
        func resume(returning credentials: Credentials, token: String) {
            switch self {
            case .token(let caller): caller.resume(returning: token)
            case .credentials(let caller): caller.resume(returning: credentials)
            }
        }
    }
}

/// The session's own data in ``RefreshStateMachine``: which session it serves, its credentials and what derives from
/// them, the loop breaker's memory and the stored record it is based on. Each is a value of its own, replaced or
/// changed through one `mutating func`, so the machine has no loose fields to keep in step.
extension RefreshStateMachine {
    /// Who a session is: its identifier and user info (its generation, one per open or restore, is the machine's
    /// ``RefreshStateMachine/generation``).
    struct Identity {
        let identifier: String
        let userInfo: UserInfo
    }

    /// Which session the machine serves.
    ///
    /// ```
    /// none ──activated──▶ active ──deactivated──▶ ended ──activated──▶ active
    /// ```
    enum Phase {
        /// No session was activated yet.
        case none
        /// Tokens are served to this session.
        case active(Identity)
        /// This session ended: nothing is served; its credentials stay until the final flush has written them.
        case ended(Identity)

        var identity: Identity? {
            switch self {
            case .none: nil
            case .active(let identity), .ended(let identity): identity
            }
        }
    }

    /// The current credentials with what the machine reads of them at every request, computed once when they change.
    ///
    /// The lead time, the soft window and the loop-breaker window scale to the lifetime, but they are read only off the
    /// hot path (a request at or after ``RefreshStateMachine/nextActionAt``, a waiter deciding whether to join the
    /// flight, a deadline recomputed): they are derived from ``lifetime`` and the policy there (``leadTime(_:)``,
    /// ``softWindow(_:)``, ``loopWindow(_:)``) rather than kept in every idle session.
    struct Held {
        let credentials: Credentials?
        /// When they expire, in seconds since the reference date (`infinity` when unknown).
        let expiresAt: Double
        /// Expiry minus issue time when both are known, else `infinity`: an unknown lifetime counts as an endless one,
        /// and neither scales the policy's windows down.
        let lifetime: Double

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
            let expiry = credentials?.expiresAt?.timeIntervalSinceReferenceDate ?? .infinity
            expiresAt = expiry
            let issued = credentials?.lastRefreshedAt?.timeIntervalSinceReferenceDate ?? issuedAt
            lifetime = expiry.isFinite ? issued.map { expiry - $0 } ?? .infinity : .infinity
        }

        /// The access token (empty without credentials), read from the credentials' shared fields: a copy kept here
        /// would cost every idle session 16 bytes to save the hot path one load.
        var token: String { credentials?.accessToken ?? "" }

        /// The lead time for these credentials under `policy`: the policy's, scaled down to the lifetime.
        func leadTime(_ policy: Policy) -> Double {
            min(policy.leadTime, max(0, lifetime) * Policy.leadFraction)
        }

        /// The soft window for these credentials under `policy` (at least the lead time).
        func softWindow(_ policy: Policy) -> Double {
            max(leadTime(policy), min(policy.softWindow, max(0, lifetime) * Policy.softWindowFraction))
        }

        /// The loop breaker's window for these credentials under `policy`.
        func loopWindow(_ policy: Policy) -> Double {
            min(policy.loopWindow, max(lifetime, Policy.minimumLoopWindow))
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
    /// written as. A class, made anew at each change: a session of a store without coordination keeps none.
    final class StoredBase: Sendable {
        /// Its revision; `nil` when unknown (before a sign-in's first write landed).
        let revision: UInt64?
        /// Its refresh token, as far as this session knows: a conflicting write finding it still stored may write
        /// over that record, since it holds nothing newer.
        let refreshToken: String?

        init(revision: UInt64?, refreshToken: String?) {
            self.revision = revision
            self.refreshToken = refreshToken
        }
    }

    // MARK: - Reading the session's data

    var active: Bool {
        if case .active = phase { return true }
        return false
    }
    var identifier: String { phase.identity?.identifier ?? "" }
    var userInfo: UserInfo { phase.identity?.userInfo ?? UserInfo(id: "") }
    var credentials: Credentials? { held.credentials }
    var token: String { held.token }
    var expiresAt: Double { held.expiresAt }
    /// Expiry minus issue time, `infinity` when unknown.
    var lifetime: Double { held.lifetime }
    var leadTime: Double { held.leadTime(policy) }
    var softWindow: Double { held.softWindow(policy) }
    var loopWindow: Double { held.loopWindow(policy) }
    var heldRevision: UInt64? { base?.revision }

    /// Makes `credentials` current.
    private mutating func setCredentials(_ credentials: Credentials?, issuedAt: Double? = nil) {
        held = Held(credentials, issuedAt: issuedAt, policy: policy)
    }
}

extension RefreshStateMachine {
    // MARK: - Flights

    /// The flight `flightID` is about to do its next step (announce itself, send its refresh token): whether it is
    /// still the session's. One that is not is dropped: it has sent nothing. With `announcing`, a current one
    /// emits `.refreshStarted`.
    mutating func flightProceeds(flightID: UInt64, announcing: Bool) -> (Bool, Actions) {
        guard isCurrent(flightID: flightID) else { return (false, .none) }
        return (true, announcing ? Actions(events: [.init(kind: .refreshStarted)]) : .none)
    }

    /// How a failed refresh was reported.
    struct FailureReport {
        /// How many waiters got the failure.
        var waiters: Int
        /// The generation whose session the gate must invalidate (a terminal failure, except during a restore,
        /// which throws instead), if any.
        var invalidates: UInt64?
    }

    /// The refresh of `flightID` failed with `error` (whose ``UserSessionError/failureClass`` is set):
    /// `.refreshFailed` is emitted and the waiters fail. A terminal failure ends the session's refreshes; any other
    /// backs off (`jitter` in 0…1), a transient one by `shared` when the ledger keeps one for the credentials. `nil`
    /// for a stale flight (the session was deactivated, replaced, or its credentials updated): nothing is reported.
    mutating func refreshFailed(
        flightID: UInt64, error: UserSessionError, now: Double, jitter: Double,
        shared: FlightMachine.Backoff? = nil
    ) -> (FailureReport?, Actions) {
        // The failure of a flight whose session ended is never reported.
        guard isCurrent(flightID: flightID) else { return (nil, .none) }
        let failureClass = error.failureClass ?? .transient
        let policy = self.policy
        let (flight, waiters) = flights.failed(error, failureClass: failureClass, now: now, shared: shared) {
            policy.backoff(attempt: $0, jitter: jitter)
        }
        recomputeDeadline()
        // A restore is still deciding whether to open at all; it throws instead of invalidating.
        let invalidates = failureClass == .terminal && flight.kind != .restore ? generation : nil
        var actions = Actions.resume(waiters, with: .failure(error))
        actions.events = [.init(kind: .refreshFailed(failureClass), detail: error.message)]
        return (FailureReport(waiters: waiters.count, invalidates: invalidates), actions)
    }

    /// Whether the result of `flightID` would still be used.
    func isCurrent(flightID: UInt64) -> Bool {
        active && flights.isCurrent(flightID)
    }

    /// The refresh of `flightID` returned `newCredentials`, and its commit holds the identifier's write turn: where
    /// the credentials go, the active session's record while the flight is current (from here on the write belongs
    /// to the session even if it deactivates before the write returns, since the server has already rotated the
    /// refresh token). `nil` for a flight whose session ended: its rotation is the ledger's to write.
    ///
    /// Asked holding the turn, so that the target (its fence, the revision it is conditional on) is the one no
    /// other write of this process can change until the commit's write returns, and an opening session's sign-in,
    /// which holds the turn from before its credentials are readable, is written before any commit of it.
    func refreshReturned(flightID: UInt64, newCredentials: Credentials) -> PersistTarget? {
        isCurrent(flightID: flightID) ? target(newCredentials) : nil
    }

    /// The write of a refresh's credentials (to ``refreshReturned(flightID:newCredentials:)``'s target) returned,
    /// failing with `persistError` or not: the credentials are published, `.persistenceFailed` is emitted when the
    /// write failed (the ledger keeps them as unwritten and retries), then `.credentialsRefreshed`, and the waiters
    /// get them. Returns how many waiters there were, or `nil` when the flight became stale during the write (its
    /// waiters were already failed; a write that failed left its credentials to the ledger).
    ///
    /// `revision` is the coordinated store's revision the write landed as (a conditional write): the session's
    /// next write is conditional on it. The gate records this transition's events under the lock `deactivated()`
    /// is ordered by, so none of them follows the session's end (``CredentialsGate/commit(_:_:turn:)``).
    mutating func commitWritten(
        flightID: UInt64, newCredentials: Credentials, revision: UInt64? = nil, persistError: (any Error)?,
        now: Double, jitter: Double
    ) -> (Int?, Actions) {
        guard isCurrent(flightID: flightID) else { return (nil, .none) }
        if let revision {
            // A conditional write landed as `revision`: the record the session's next write is conditional on.
            setBase(revision: max(heldRevision ?? 0, revision), refreshToken: newCredentials.refreshToken)
        }
        let (flight, waiters) = flights.succeeded()
        setCredentials(newCredentials, issuedAt: flight.startedAt)
        breaker.recordSuccess(at: now)
        recomputeDeadline()
        var actions = Actions.resume(waiters, with: .success(newCredentials))
        if let persistError {
            actions.events.append(.init(kind: .persistenceFailed, detail: Self.describePersistFailure(persistError)))
        }
        actions.events.append(.init(kind: .credentialsRefreshed))
        return (waiters.count, actions)
    }

    // MARK: - Credentials from elsewhere

    /// The identity the update must be written under, when a session of this generation is active.
    func updateTarget(_ newCredentials: Credentials) -> (generation: UInt64, target: PersistTarget)? {
        guard active else { return nil }
        return (generation, target(newCredentials))
    }

    /// Credentials obtained elsewhere were written for the session of `generation` (``updateTarget(_:)``) and are
    /// published: `.credentialsUpdated` says what changed, and a refresh in flight is superseded (its result will
    /// be discarded, its waiters get these credentials). Nothing happens when that session is not the active one.
    mutating func credentialsUpdated(_ credentials: Credentials, generation: UInt64) -> Actions {
        guard let (change, waiters) = replaceCredentials(with: credentials, generation: generation) else {
            return .none
        }
        var actions = Actions.resume(waiters, with: .success(credentials))
        actions.events = [.init(kind: .credentialsUpdated(change))]
        return actions
    }

    /// The session of `generation` read `record`, which another process stored, from a coordinated store (or, for
    /// a store without coordination, a record another process rotated): its credentials are published without a
    /// refresh when the record is newer than what the session holds (``storeIsNewer(_:than:generation:)``), as for
    /// ``credentialsUpdated(_:generation:)``. Returns whether they were.
    mutating func recordAdopted(_ record: RevisedSession, generation: UInt64) -> (Bool, Actions) {
        guard storeIsNewer(record, than: credentials, generation: generation),
            let credentials = record.session.credentials,
            let replaced = replaceCredentials(with: credentials, generation: generation)
        else { return (false, .none) }
        setBase(revision: record.revision > 0 ? record.revision : heldRevision, refreshToken: credentials.refreshToken)
        var change = replaced.change
        change.adoptedFromStore = true
        var actions = Actions.resume(replaced.waiters, with: .success(credentials))
        actions.events = [.init(kind: .credentialsUpdated(change), detail: "adopted from the token store")]
        return (true, actions)
    }

    /// Another controller of this process advanced the identifier's newest credentials to `newest`, reached from
    /// `held`, which the session of `generation` holds (the ledger tells the views holding the identifier): the
    /// session takes them without a refresh of its own. `.credentialsRefreshed` says so when refreshes alone led
    /// there (`refreshedOnly`), `.credentialsUpdated` when credentials were handed over on the way. Returns whether it
    /// did: not when the session changed, holds other credentials now, has a flight of its own (its result comes from
    /// the same ledger entry, and its commit catches up after), or its refreshes ended for good.
    mutating func entryAdvanced(
        to newest: Credentials, from held: Credentials, refreshedOnly: Bool, generation: UInt64
    ) -> (Bool, Actions) {
        guard !flights.isRefreshing, !flights.isTerminated, credentials == held,
            let replaced = replaceCredentials(with: newest, generation: generation)
        else { return (false, .none) }
        setBase(revision: heldRevision, refreshToken: newest.refreshToken)
        var actions = Actions.resume(replaced.waiters, with: .success(newest))
        let kind: UserSessionEvent.Kind = refreshedOnly ? .credentialsRefreshed : .credentialsUpdated(replaced.change)
        actions.events = [.init(kind: kind, detail: "changed by another controller of this process")]
        return (true, actions)
    }

    /// Another controller of this process had the credentials `held` (or the newest they lead to) refused for good,
    /// and the session of `generation` holds them: its refreshes end as after its own terminal failure (every later
    /// request fails with ``CredentialsLedger/refusedError``). Returns the generation whose session the gate must
    /// invalidate: `nil` when the session changed, holds other credentials now, has a flight of its own (it fails
    /// the same way from the same ledger entry) or its refreshes already ended.
    mutating func entryRefused(_ held: Credentials, generation: UInt64) -> (UInt64?, Actions) {
        guard active, self.generation == generation, !flights.isRefreshing, !flights.isTerminated, credentials == held
        else { return (nil, .none) }
        return (generation, endRefreshes(with: CredentialsLedger.refusedError))
    }

    /// Another holder's refresh of the credentials `held` failed for a while (the server or the network is down),
    /// and the session of `generation` holds them with no flight of its own: it backs off with `backoff`, the one the
    /// ledger keeps for every holder, so it serves a still-valid token and fails a request for an expired one at once
    /// until `backoff.retryAt`, instead of asking the failing server again. Nothing is announced: the failure was
    /// another session's, so there is nothing to run.
    mutating func entryBackedOff(_ backoff: FlightMachine.Backoff, held: Credentials, generation: UInt64) -> Actions {
        guard active, self.generation == generation, credentials == held, flights.backedOffElsewhere(backoff) else {
            return .none
        }
        recomputeDeadline()
        return .none
    }

    /// The session of `generation` found its record removed from the coordinated store by someone else (signed out
    /// elsewhere): it stops refreshing and writes nothing back; the flight in progress, if any, is dropped and its
    /// waiters fail. Returns whether it was the active session (which the controller must then close).
    mutating func recordRemoved(generation: UInt64) -> (Bool, Actions) {
        guard active, self.generation == generation else { return (false, .none) }
        return (true, endRefreshes(with: Self.clearedElsewhereError))
    }

    /// The session of `generation` found its credentials refused for good in the coordinated store: another
    /// instance's refresh of them, or of the credentials it rotated them to, was refused, and its record says so
    /// (``storeRefuses(_:_:generation:)``). Its refreshes end as after its own refusal; the flight in progress, if
    /// any, is dropped and its waiters fail. Returns whether it was the active session (which the controller must then
    /// invalidate).
    mutating func recordRefused(generation: UInt64) -> (Bool, Actions) {
        guard active, self.generation == generation, !flights.isTerminated else { return (false, .none) }
        return (true, endRefreshes(with: CredentialsLedger.refusedError))
    }

    /// The session's refreshes end for good with `error` (a refusal the entry told of, or a refusal or a removal
    /// found in the store): the flight in progress, if any, is dropped, no token is served, and its waiters fail.
    private mutating func endRefreshes(with error: UserSessionError) -> Actions {
        let waiters = flights.terminated(by: error)
        recomputeDeadline()
        return .resume(waiters, with: .failure(error))
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

    /// Whether `record` says the refresh token of `held` was refused for good: it is marked refused and holds that
    /// very token, or credentials that replace `held` for the session of `generation` (another instance rotated them,
    /// and the rotation was refused).
    func storeRefuses(_ record: RevisedSession, _ held: Credentials?, generation: UInt64) -> Bool {
        guard record.session.refreshTokenRefused else { return false }
        return record.session.credentials?.refreshToken == held?.refreshToken
            || storeIsNewer(record, than: held, generation: generation)
    }

    /// The fallback for stores without coordination: a refresh of `flightID` that sent `sent` was refused as
    /// `invalid_grant`, and the store holds `stored` under `identifier`. Whether `stored` may take over: it has a
    /// refresh token other than the one sent (another process rotated it within the server's reuse grace period),
    /// and the flight is still the session's, whose identifier is still `identifier`.
    func mayRetryWithStored(flightID: UInt64, identifier: String, sent: Credentials, stored: Credentials) -> Bool {
        guard isCurrent(flightID: flightID), ExactIdentifier.areEqual(self.identifier, identifier) else { return false }
        return stored.refreshToken != nil && stored.refreshToken != sent.refreshToken
    }

    /// Publishes credentials that are already in the store for the active session of `generation`: what changed,
    /// and the waiters of the refresh they supersede. `nil` when that session is not the active one.
    private mutating func replaceCredentials(with newCredentials: Credentials, generation: UInt64)
        -> (change: UserSessionEvent.CredentialsChange, waiters: [Waiter])?
    {
        guard active, self.generation == generation else { return nil }
        let old = credentials
        let oldExpiry = expiresAt
        setCredentials(newCredentials)
        let waiters = flights.credentialsChanged()
        recomputeDeadline()
        let oldGranted = old?.grantedPermissions ?? []
        let change = UserSessionEvent.CredentialsChange(
            extended: expiresAt > oldExpiry,
            addedPermissions: newCredentials.grantedPermissions.subtracting(oldGranted),
            removedPermissions: oldGranted.subtracting(newCredentials.grantedPermissions))
        return (change, waiters)
    }
}

extension RefreshStateMachine {
    // MARK: - Writes

    /// A write of `target` landed as `revision` in a coordinated store (a conditional write, or the overwrite of
    /// credentials handed over): when it was the active session's, that revision and its refresh token are now what
    /// the session holds.
    mutating func recordWritten(_ target: PersistTarget, revision: UInt64) -> Actions {
        guard active, generation == target.generation, ExactIdentifier.areEqual(identifier, target.identifier)
        else { return .none }
        setBase(revision: max(heldRevision ?? 0, revision), refreshToken: target.stored.credentials?.refreshToken)
        return .none
    }

    // MARK: - The last write of a closing session

    /// After ``deactivated()``, the final flush holds the write turn: the one last write of `unwritten`, what the ledger
    /// still has to write for the session's identifier, if anything. Clears the credentials from memory.
    mutating func finalFlushBegan(unwritten: StoredSession?) -> (PersistTarget?, Actions) {
        guard !active else { return (nil, .none) }
        defer { setCredentials(nil) }
        guard let unwritten, phase.identity != nil else { return (nil, .none) }
        return (
            PersistTarget(
                identifier: identifier, stored: unwritten, generation: generation, baseRevision: heldRevision,
                baseRefreshToken: base?.refreshToken, ledgerFence: ledgerFence),
            .none
        )
    }

    static func describePersistFailure(_ error: any Error) -> String {
        if let error = error as? UserSessionError { return "writing credentials failed: \(error)" }
        return "writing credentials failed: \(String(describing: type(of: error)))"
    }
}

extension RefreshStateMachine {
    /// What to write, captured under the lock once the identifier's write turn is held.
    struct PersistTarget {
        let identifier: String
        let stored: StoredSession
        /// The session the write belongs to.
        let generation: UInt64
        /// For a ``CoordinatedTokenStore``: the revision the write is conditional on (`nil`: a plain save).
        var baseRevision: UInt64? = nil
        /// The refresh token of the record at ``baseRevision``, as far as the session knows.
        var baseRefreshToken: String? = nil
        /// The ledger's sign-out fence the write is taken under: a sign-out of the identifier since makes the
        /// ledger refuse it (or undo it when it lands late).
        var ledgerFence: UInt64 = 0
    }

    /// A target for the active session's record.
    private func target(_ credentials: Credentials) -> PersistTarget {
        PersistTarget(
            identifier: identifier, stored: StoredSession(userInfo: userInfo, credentials: credentials),
            generation: generation, baseRevision: heldRevision,
            baseRefreshToken: base?.refreshToken, ledgerFence: ledgerFence)
    }
}

extension RefreshStateMachine {
    /// The capped exponential backoff with "equal jitter"; see ``Policy/backoff(attempt:jitter:)``.
    func backoff(attempt: Int, jitter: Double) -> Double {
        policy.backoff(attempt: attempt, jitter: jitter)
    }

    /// Recomputes ``nextActionAt`` from everything that can require action.
    private mutating func recomputeDeadline() {
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
    /// work, emit events. Built under the lock, performed by
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

        /// The refresh-loop breaker refused a refresh of the session of `generation`: report it (before the caller
        /// gets the error), if that session is still active.
        var loopTripped: (generation: UInt64, detail: String)?
        /// Events of the transition, emitted in this order (before any caller or waiter is resumed).
        var events: [Event] = []
        /// One caller decided at once (served, failed, or cancelled), with its result.
        var caller: (continuation: ParkedCaller?, result: Result<Credentials, any Error>)?
        /// Waiters of a refresh that ended, resumed in arrival order with ``waitersResult``.
        var waiters: [Waiter] = []
        /// What ``waiters`` get; `nil` (read as ``UserSessionError/Code/sessionNotOpen``) until an input sets it.
        /// Optional, so that the actions of an input that resumes nobody (most of them: every caller joining a
        /// refresh gets some) box no error: an `any Error` payload is a heap allocation each time it is made.
        var waitersOutcome: Result<Credentials, any Error>?
        /// A refresh to start in the background.
        var refresh: RefreshJob?

        static var none: Actions { Actions() }

        /// The result ``waiters`` are resumed with.
        var waitersResult: Result<Credentials, any Error> {
            waitersOutcome ?? .failure(RefreshStateMachine.notOpenError)
        }

        /// Resume `waiters` with `result`, made only when there is a waiter to resume.
        static func resume(_ waiters: [Waiter], with result: @autoclosure () -> Result<Credentials, any Error>)
            -> Actions
        {
            waiters.isEmpty ? Actions() : Actions(waiters: waiters, waitersOutcome: result())
        }
    }
}
