/// The rules of one key's tokens (one scope set and resource set of a ``ClientCredentialsTokenManager``, or one user
/// and audience of a token exchange), as a pure state machine.
///
/// The manager keeps one per key in its lock, feeds it inputs named after what happened (`tokenAsked`,
/// `flightSucceeded`, `flightFailed`, `waiterCancelled`, `forgotten`, `reconfigured`) and performs what they return
/// (resume callers, start a token request) after releasing the lock. Nothing here suspends, reads a clock or calls
/// user code: the time and the jitter come in as arguments.
///
/// It reuses the user sessions' refresh rules rather than restating them: ``RefreshStateMachine/Held`` scales the lead
/// time and the proactive window to the token's own lifetime, ``RefreshStateMachine/Policy/backoff(attempt:jitter:)``
/// spaces retries, ``RefreshStateMachine/LoopBreaker`` stops forced requests in a loop, and ``FlightWaiters`` keeps the
/// callers of the one request in flight in arrival order.
///
/// ```
/// empty/held ──token needed──▶ requesting ──succeeded──▶ held
///                               │   │
///                               │   └──failed (transient, misconfiguration)──▶ backing off ──retryAt──▶ …
///                               └──failed (client rejected)──▶ rejected ──reconfigured──▶ empty/held
/// ```
///
/// Generic over what a waiter is (a ``Parked`` caller in the manager, anything in the synchronous tests).
struct ClientTokenMachine<Continuation> {

    /// A token request to send: the manager runs it and reports back with `id`.
    struct FlightJob: Sendable, Equatable {
        let id: UInt64
        /// A token the resource server refused: never adopt it from the store again.
        let rejectedToken: String?
        /// The expiry of the token held when it started (`-infinity` without one): a stored token is adopted only
        /// when it lives longer.
        let heldExpiresAt: Double
    }

    /// The request in flight and who waits for it.
    private struct Flight {
        let job: FlightJob
        var waiters = FlightWaiters<Continuation>()
        /// `false` once the key was forgotten while it ran: its token is handed to its waiters but not kept.
        var keepsResult = true
        /// Set when the key was dropped for good while it ran (its user signed out): its waiters get this error.
        var droppedWith: UserSessionError?
    }

    /// What failed requests left behind.
    private struct Backoff {
        let failures: Int
        let retryAt: Double
        let lastFailure: UserSessionError
        /// After a misconfiguration, no proactive request starts until a request succeeds or the client changes.
        let blocksProactive: Bool
    }

    /// The answer to a token request.
    enum Asked {
        /// Hand out this token now.
        case served(String)
        /// Hand out this token now, and start `FlightJob` in the background (the proactive window).
        case servedRefreshing(String, FlightJob)
        /// Fail the caller now.
        case failed(UserSessionError)
        /// The caller waits for the request in flight.
        case joined
        /// The caller waits for a new request, which must be started.
        case started(FlightJob)
    }

    let policy: RefreshStateMachine.Policy
    private(set) var held: RefreshStateMachine.Held
    /// The hot path serves ``token`` without anything else while `now < freshUntil`.
    private(set) var freshUntil = -Double.infinity
    private var flight: Flight?
    private var backoff: Backoff?
    /// The token endpoint rejected the client for this key: every request fails with it until ``reconfigured()``.
    private(set) var rejection: UserSessionError?
    private var breaker = RefreshStateMachine.LoopBreaker()
    private var nextFlightID: UInt64 = 1

    init(policy: RefreshStateMachine.Policy) {
        self.policy = policy
        held = RefreshStateMachine.Held(nil, policy: policy)
    }

    /// The token held (empty without one).
    var token: String { held.token }
    /// Whether a token request is in flight.
    var isRequesting: Bool { flight != nil }
    /// How many callers wait for the request in flight.
    var waiterCount: Int { flight?.waiters.continuations.count ?? 0 }
    /// Whether the machine holds nothing worth keeping (no token, no flight, no failure to remember).
    var isIdle: Bool { held.credentials == nil && flight == nil && backoff == nil && rejection == nil }

    /// The token when it is fresh at `now` (before its proactive window), for the hot path.
    func freshToken(now: Double) -> String? {
        now < freshUntil ? held.token : nil
    }

    // MARK: - Inputs

    /// A caller asks for a token at `now`; `rejected` is the token an operation was refused with (a replay), which
    /// must not be handed out again. A caller that waits (`joined`, `started`) is added as `waiter`.
    mutating func tokenAsked(now: Double, rejected: String?, waiter: FlightWaiters<Continuation>.Waiter) -> Asked {
        if let rejection { return .failed(rejection) }
        let hasToken = held.credentials != nil
        let token = held.token
        if let rejected {
            // A replay: when the token was replaced meanwhile, the replacement is the answer.
            if hasToken, token != rejected, now < held.expiresAt { return .served(token) }
        } else if hasToken, now < held.expiresAt - held.leadTime(policy) {
            // Fresh, or inside the proactive window: served at once, one background request in the window.
            guard now >= held.expiresAt - held.softWindow(policy), flight == nil,
                now >= (backoff?.retryAt ?? -.infinity), backoff?.blocksProactive != true
            else { return .served(token) }
            let job = startFlight(rejected: nil)
            return .servedRefreshing(token, job)
        }
        if flight != nil {
            flight?.waiters.add(waiter)
            return .joined
        }
        if let backoff, now < backoff.retryAt {
            // Backing off: a token that is still valid is better than the last failure.
            if hasToken, rejected == nil, now < held.expiresAt { return .served(token) }
            return .failed(backoff.lastFailure)
        }
        if rejected != nil {
            guard breaker.allows(now: now, window: held.loopWindow(policy), maximum: policy.loopMaximum) else {
                return .failed(ClientTokenErrors.loop)
            }
            // The held token was refused: nobody gets it again.
            if token == rejected { setHeld(nil, now: now) }
        }
        let job = startFlight(rejected: rejected)
        flight?.waiters.add(waiter)
        return .started(job)
    }

    /// What a request that ended hands its waiters: resume each with `result`.
    struct Landing {
        var waiters: [Continuation] = []
        var result: Result<String, UserSessionError> = .failure(ClientTokenErrors.forgotten)
    }

    /// The request `id` brought `credentials` at `now`, from the token endpoint (`requested`) or adopted from the
    /// store: returns its waiters, to resume with the access token (or with the error the key was dropped with).
    mutating func flightSucceeded(id: UInt64, credentials: Credentials, requested: Bool, now: Double) -> Landing {
        guard let flight, flight.job.id == id else { return Landing() }
        self.flight = nil
        if let dropped = flight.droppedWith {
            return Landing(waiters: flight.waiters.continuations, result: .failure(dropped))
        }
        if flight.keepsResult {
            backoff = nil
            if requested { breaker.recordSuccess(at: now) }
            setHeld(credentials, now: now)
        }
        return Landing(waiters: flight.waiters.continuations, result: .success(credentials.accessToken))
    }

    /// The request `id` failed with `error` at `now`: returns its waiters, to fail. A rejected client makes the key
    /// refuse every request until ``reconfigured()``; any other failure backs off, doubling with `jitter` (0…1).
    mutating func flightFailed(id: UInt64, error: UserSessionError, now: Double, jitter: Double) -> Landing {
        guard let flight, flight.job.id == id else { return Landing() }
        self.flight = nil
        let landing = Landing(waiters: flight.waiters.continuations, result: .failure(flight.droppedWith ?? error))
        guard flight.keepsResult else { return landing }
        if error.code == .clientRejected {
            rejection = error
        } else if error.failureClass != .cancelled {
            let failures = (backoff?.failures ?? 0) + 1
            backoff = Backoff(
                failures: failures, retryAt: now + policy.backoff(attempt: failures, jitter: jitter),
                lastFailure: error,
                blocksProactive: error.failureClass == .misconfiguration || backoff?.blocksProactive == true)
        }
        recomputeFreshness()
        return landing
    }

    /// The waiter `id` stopped waiting (its task was cancelled): returns its continuation if it still waited.
    mutating func waiterCancelled(id: UInt64) -> Continuation? {
        flight?.waiters.remove(id: id)
    }

    /// The key's token is forgotten: nothing is served from memory again, and a request in flight hands its token to
    /// its waiters without keeping it, or, with `failingWith`, fails them with that error. Failures are remembered
    /// (forgetting is not reconfiguring).
    mutating func forgotten(now: Double, failingWith error: UserSessionError? = nil) {
        flight?.keepsResult = false
        if let error { flight?.droppedWith = error }
        setHeld(nil, now: now)
    }

    /// The client was reconfigured (new credentials): a rejection and the backoff are forgotten.
    mutating func reconfigured() {
        rejection = nil
        backoff = nil
        recomputeFreshness()
    }

    // MARK: - Rules

    private mutating func startFlight(rejected: String?) -> FlightJob {
        let job = FlightJob(
            id: nextFlightID, rejectedToken: rejected,
            heldExpiresAt: held.credentials == nil ? -.infinity : held.expiresAt)
        nextFlightID += 1
        flight = Flight(job: job)
        return job
    }

    private mutating func setHeld(_ credentials: Credentials?, now: Double) {
        held = RefreshStateMachine.Held(credentials, issuedAt: now, policy: policy)
        recomputeFreshness()
    }

    private mutating func recomputeFreshness() {
        freshUntil = held.credentials == nil || rejection != nil ? -.infinity : held.expiresAt - held.softWindow(policy)
    }
}

/// The errors a ``ClientTokenMachine`` hands out itself.
enum ClientTokenErrors {
    static let forgotten = UserSessionError(.sessionNotOpen, "the token was dropped")

    static let loop = UserSessionError(
        .refreshLoop,
        "too many token requests after refused tokens in a short time; the token is not requested again yet",
        failureClass: .transient)
}
