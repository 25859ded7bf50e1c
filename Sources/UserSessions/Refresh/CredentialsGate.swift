import Foundation
import Synchronization

/// The single-flight gate in front of a session's credentials.
///
/// Every path that needs a token or a refresh — `accessToken()`, proactive refresh, a replay after an
/// authentication failure, `refreshCredentials()`, `restore` — goes through this one object, so however many
/// callers find the token expiring, the refresher is called once.
///
/// The rules live in ``RefreshStateMachine``, held in a `Locked` (the package's lock). Every input goes through one funnel,
/// ``modifyStateAndRunActions(_:)``: the transition runs under the lock and returns ``RefreshStateMachine/Actions``,
/// which the gate performs after releasing it: it starts refreshes in unstructured tasks (so cancelling the caller
/// that triggered one never cancels it), writes to the store (holding the persistence slot through
/// ``withPersistSlot(_:)``), emits events and resumes waiters in arrival order.
///
/// The controller calls ``activate(identifier:userInfo:credentials:generation:)`` when a session opens (before
/// its services start) and ``deactivate()`` first thing when it closes, is replaced or becomes invalid.
final class CredentialsGate: Sendable {
    /// The machine. Private: it changes only through ``modifyStateAndRunActions(ordered:_:)`` and is read only
    /// through ``inspect(_:)`` and the hot path.
    private let state: Locked<RefreshStateMachine>
    /// Waiter ids, increasing, allocated without the lock so that the cancellation handler knows its id.
    private let waiterIDs = Atomic<UInt64>(0)
    /// When a token was last asked for, as the bit pattern of seconds since the reference date; see `noteDemand`.
    let lastDemandBits = Atomic<UInt64>(0)
    private let terminalFailureHandler = Locked<(@Sendable (UInt64) async -> Void)?>(nil)
    let backgroundWork = Locked(BackgroundWork())
    /// Orders the events of refreshes (started, failed, loop tripped) and of late writes against `deactivate()`:
    /// one is emitted only while its session is active, checked and emitted under this lock, which `deactivate()`
    /// takes too. So none of them ever follows the session's `.closed` or `.invalidated`. Never taken on the hot
    /// path; taken before `state`, never after it.
    let eventOrder = Locked(())
    /// The background timer that retries a failed write when its backoff elapses.
    let retryTimer = TaskSlot()
    let refresher: (any TokenRefresher)?
    let store: any TokenStore
    /// `store`, when it coordinates refreshes across processes: refreshes then run under its lease, writes are
    /// conditional on the revision held, and its changes are adopted while a session is active.
    let coordinatedStore: (any CoordinatedTokenStore)?
    /// The task consuming the coordinated store's changes for the active session.
    let changeSubscription = TaskSlot()
    /// What the gate calls when the active session's record was removed elsewhere; the controller then closes that
    /// session (`.closed(.clearedElsewhere)`).
    let storeRemovedHandler = Locked<(@Sendable (UInt64) async -> Void)?>(nil)
    let events: EventHub
    /// The owner of every identifier's credentials shared by the controllers of this process that use `store`.
    let ledger: CredentialsLedger
    /// The identifier this gate holds in the ledger, from ``activate(identifier:userInfo:credentials:generation:restoring:revision:)``
    /// until ``deactivate()`` has written what it could.
    let ledgerHold = Locked<String?>(nil)
    let policy: Policy
    let clock: SessionClock
    /// The task of the latest refresh or write retry, kept only so tests can await it.
    let lastBackgroundTask = Locked<Task<Void, Never>?>(nil)
    /// The final flushes started by ``deactivate()``, and the newest one it stopped waiting for: an abandoned flush
    /// reports nothing.
    let flushes = Locked<(started: UInt64, abandoned: UInt64)>((0, 0))

    /// Everything the gate takes from the controller's configuration, as plain values.
    struct Policy: Sendable {
        var refresh: RefreshStateMachine.Policy
        /// How long `deactivate()` waits for the write in progress, twice, before it leaves it behind.
        var storeTimeout: Duration
        /// The session's clock: token expiry, backoffs and retry times.
        var clock: SessionClock
        /// What the store-flush deadline waits on.
        var deadlineClock: DeadlineClock
    }

    init(
        refresher: (any TokenRefresher)?, store: any TokenStore, ledger: CredentialsLedger? = nil, events: EventHub,
        policy: Policy
    ) {
        self.refresher = refresher
        self.store = store
        self.coordinatedStore = store as? any CoordinatedTokenStore
        self.ledger = ledger ?? CredentialsLedger.shared(for: store)
        self.events = events
        self.policy = policy
        self.clock = policy.clock
        self.state = Locked(RefreshStateMachine(policy: policy.refresh, hasRefresher: refresher != nil))
    }

    /// Sets what the gate calls when a refresh fails terminally; the controller then invalidates the session of
    /// that generation (if it is still the current one). Not called for a refresh started by ``ensureUsable()``:
    /// that one throws to the restoring caller instead.
    func setTerminalFailureHandler(_ handler: @escaping @Sendable (UInt64) async -> Void) {
        terminalFailureHandler.withLock { $0 = handler }
    }

    func currentTerminalFailureHandler() -> (@Sendable (UInt64) async -> Void)? {
        terminalFailureHandler.withLock { $0 }
    }

    /// Sets what the gate calls when a coordinated store says the active session's record was removed elsewhere.
    func setStoreRemovedHandler(_ handler: @escaping @Sendable (UInt64) async -> Void) {
        storeRemovedHandler.withLock { $0 = handler }
    }

    /// Starts serving `credentials` for a newly opened session of `generation`. A refresh still running for an
    /// earlier generation is not served to it; when `restoring` from the stored record that such a refresh of the
    /// same identifier sent, the new session adopts that refresh instead of sending the token a second time.
    ///
    /// `revision` is the revision of the coordinated store's record the credentials were read from (a restore);
    /// with a coordinated store the session also follows the store's changes until ``deactivate()``.
    func activate(
        identifier: String, userInfo: UserInfo, credentials: Credentials?, generation: UInt64, restoring: Bool = false,
        revision: UInt64? = nil
    ) {
        disarmRetryTimer()
        stopWatchingStore()
        events.setGeneration(generation)
        let fence = ledger.hold(identifier)
        let previous = ledgerHold.withLock { hold in
            defer { hold = identifier }
            return hold
        }
        if let previous { ledger.release(previous, schedule: ledgerSchedule) }
        modifyStateAndRunActions {
            $0.activated(
                identifier: identifier, userInfo: userInfo, credentials: credentials, generation: generation,
                restoring: restoring, revision: revision, ledgerFence: fence)
        }
        startWatchingStore(identifier: identifier, generation: generation)
    }

    /// Stops serving: waiters fail with ``UserSessionError/Code/sessionNotOpen``, a refresh still in flight has
    /// its result discarded when it returns, a write in progress completes before this returns (so a later
    /// `remove` cannot be undone by it), and credentials that could not be written before get one last try.
    ///
    /// The refresh in flight is not cancelled: that cannot un-rotate a refresh token the server has already rotated,
    /// and cancelling the write of its commit would lose that token. Only a store that overruns
    /// ``UserSessionController/Configuration/storeTimeout`` makes this cancel the background work (a store that
    /// honours cancellation then fails its write at once, and the final write takes over its credentials); one that
    /// overruns it again is reported with `.persistenceFailed` and left behind, so closing never hangs.
    ///
    /// A refresh in flight becomes an orphan: its result is never served, published or announced, but it is
    /// written to the session's own record (see ``RefreshStateMachine/Orphan``). A write that overran both
    /// deadlines loses the persistence slot (so later writes are not blocked for ever); if it lands later, what
    /// it changed is repaired (``RefreshStateMachine/repairLateWrite(_:now:)``).
    func deactivate() async {
        // Ordered: no event of a refresh or background write of this session is emitted after this transition.
        modifyStateAndRunActions(ordered: true) { $0.deactivated() }
        stopWatchingStore()
        disarmRetryTimer()
        defer { releaseLedgerHold() }
        let (timeout, deadlineClock) = (policy.storeTimeout, policy.deadlineClock)
        let number = flushes.withLock { flushes in
            flushes.started += 1
            return flushes.started
        }
        let flush = Task { await self.finalFlush(number) }
        if await Deadline.wait(for: flush, timeout: timeout, clock: deadlineClock) { return }
        cancelBackgroundWork()
        if await Deadline.wait(for: flush, timeout: timeout, clock: deadlineClock) { return }
        // Marked abandoned under the event lock, so the flush, which checks the mark under it, reports nothing
        // later; cancelled after the lock is released, since cancelling runs the store's cancellation handlers.
        eventOrder.withLock { _ in flushes.withLock { $0.abandoned = number } }
        flush.cancel()
        modifyStateAndRunActions { RefreshStateMachine.Actions(slot: $0.slot.abandon()) }
        events.emit(
            .persistenceFailed, session: nil,
            detail: "the token store did not finish a write within \(timeout); closing without waiting for it")
    }

    /// The schedule the ledger retries an unwritten rotation on, once no controller writes it.
    var ledgerSchedule: CredentialsLedger.Schedule {
        CredentialsLedger.Schedule(clock: clock, policy: policy.refresh)
    }

    /// Lets go of the identifier held in the ledger; a rotation that could not be written stays there and the
    /// ledger keeps writing it.
    private func releaseLedgerHold() {
        let held = ledgerHold.withLock { hold in
            defer { hold = nil }
            return hold
        }
        if let held { ledger.release(held, schedule: ledgerSchedule) }
    }

    /// Waits for the write in progress, then writes credentials that could not be stored before, if any.
    private func finalFlush(_ number: UInt64) async {
        await withPersistSlot { ticket in
            // Cancelled once `deactivate()` stopped waiting: the session is closed without this write, and writing
            // now could land after a later `remove`.
            guard !Task.isCancelled, let flush = modifyStateAndRunActions({ $0.finalFlushTaken() }),
                let error = await write(flush, ticket: ticket)
            else { return }
            let observed = eventOrder.withLock { _ -> EventHub.Observed? in
                guard !Task.isCancelled, flushes.withLock({ $0.abandoned < number }) else { return nil }
                return events.record(
                    .persistenceFailed, session: nil, detail: RefreshStateMachine.describePersistFailure(error))
            }
            events.notifyObservers(observed)
        }
    }

    // MARK: - The funnel

    /// The funnel every input of the machine goes through: `input` runs under the lock and returns a value and the
    /// actions the transition calls for; the actions run after the lock is released, so no continuation is
    /// resumed, no task started and no event emitted while it is held.
    ///
    /// `ordered` is for the inputs whose events must be ordered against ``deactivate()`` (a refresh starting or
    /// failing, an event of a background write): the transition and its events then run under ``eventOrder``
    /// too, which `deactivate()` takes for its own transition, so none of them follows the session's `.closed`.
    @discardableResult
    func modifyStateAndRunActions<Value>(
        ordered: Bool = false, _ input: (inout RefreshStateMachine) -> (Value, RefreshStateMachine.Actions)
    ) -> Value {
        guard ordered else {
            let (value, actions) = state.withLock { machine in input(&machine) }
            run(actions)
            return value
        }
        var (value, actions, observed) = eventOrder.withLock { _ in
            let (value, actions) = state.withLock { machine in input(&machine) }
            // Recorded for subscribers under the lock (their order); observers, user code, are called after it.
            let observed = actions.events.compactMap { events.record($0.kind, session: nil, detail: $0.detail) }
            return (value, actions, observed)
        }
        for observation in observed { events.notifyObservers(observation) }
        actions.events = []
        run(actions)
        return value
    }

    /// The funnel for an input that returns only actions.
    func modifyStateAndRunActions(
        ordered: Bool = false, _ input: (inout RefreshStateMachine) -> RefreshStateMachine.Actions
    ) {
        modifyStateAndRunActions(ordered: ordered) { machine in ((), input(&machine)) }
    }

    /// Reads the machine without changing it (the hot path's deadline check, the identifier a flight needs): a
    /// read has nothing to run, so it does not go through the funnel.
    func inspect<Value>(_ read: (borrowing RefreshStateMachine) -> Value) -> Value {
        state.withLock { machine in read(machine) }
    }

    // MARK: - Reading

    /// The hot path: the access token if it can be handed out without waiting, or `nil`.
    ///
    /// One coarse clock read and one short critical section comparing against a precomputed deadline; no
    /// suspension and no allocation. Only past that deadline does it look further: in the soft window it still
    /// returns the token and starts one background refresh; a due retry of a failed write starts too. While a
    /// refresh runs and the caller must wait for it, the same critical section says so, so that the many callers
    /// finding the token expiring together go straight to ``waitForAccessToken()`` (a due write retry waits for
    /// the next call: the refresh's commit writes newer credentials anyway).
    func freshAccessToken() -> String? {
        let now = clock.nowSeconds()
        noteDemand(now)
        let read = state.withLock { machine -> HotRead in
            if now < machine.nextActionAt { return .token(machine.token) }
            return machine.demandJoinsFlight(now: now) ? .mustWait : .lookFurther
        }
        switch read {
        case .token(let token): return token
        case .mustWait: return nil
        case .lookFurther: return slowFreshAccessToken(now: now)
        }
    }

    private enum HotRead {
        case token(String)
        case mustWait
        case lookFurther
    }

    @inline(never)
    private func slowFreshAccessToken(now: Double) -> String? {
        slowFreshAccessTokenAndGeneration(now: now).token
    }

    func slowFreshAccessTokenAndGeneration(now: Double) -> (token: String?, generation: UInt64) {
        modifyStateAndRunActions { $0.tokenAsked(now: now) }
    }

    /// A valid access token, refreshing (single-flight) when needed.
    ///
    /// - Throws: ``UserSessionError/Code/sessionNotOpen``; the refresh's error (with its failure class) when this
    ///   caller waited for a refresh that failed; ``UserSessionError/Code/noRefresher`` or
    ///   ``UserSessionError/Code/refreshLoop`` when an expired token cannot be refreshed; `CancellationError` at
    ///   once when the calling task is cancelled while waiting (the refresh goes on and is committed).
    nonisolated(nonsending) func accessToken() async throws -> String {
        if let token = freshAccessToken() { return token }
        return try await waitForAccessToken()
    }

    /// The part of ``accessToken()`` after ``freshAccessToken()`` returned `nil`: wait for (or start) the
    /// refresh, or fail.
    ///
    /// This is what every one of N callers runs when they find the token expiring together, so it is kept lean:
    /// the continuation carries only the token (a `String`), joining the flight in progress takes one short
    /// critical section that copies nothing, and the cancellation flag is read outside the lock.
    nonisolated(nonsending) func waitForAccessToken() async throws -> String {
        let waiterID = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            // Unsafe continuations are correct by construction here; see `credentials(for:)`.
            try await withVisibleUnsafeThrowingContinuation { (continuation: UnsafeContinuation<String, any Error>) in
                enqueueForToken(waiterID: waiterID, continuation: continuation)
            }
        } onCancel: {
            cancelWaiter(id: waiterID)
        }
    }

    /// The current credentials, if a session is open.
    func currentCredentials() -> Credentials? {
        inspect { $0.active ? $0.credentials : nil }
    }

    /// Makes sure the active credentials are usable, refreshing them if they are expired (used by `restore`).
    ///
    /// - Throws: ``UserSessionError/Code/credentialsUnusable`` when they are expired and cannot be refreshed, or
    ///   the refresh's error. A terminal failure here does not call the terminal-failure handler.
    func ensureUsable() async throws {
        let hasCredentials = inspect { !$0.active || $0.hasCredentials }
        guard hasCredentials else { return }
        _ = try await credentials(for: .restore)
    }

    /// Forces a refresh through the gate (joining one already in flight).
    nonisolated(nonsending) func refresh() async throws -> Credentials {
        try await credentials(for: .forced(replacing: nil))
    }

    // MARK: - Waiting

    /// Runs `request`, waiting for a refresh if it needs one.
    nonisolated(nonsending) func credentials(for request: RefreshStateMachine.Request) async throws -> Credentials {
        try await credentialsAndGeneration(for: request).credentials
    }

    /// Runs `request`, waiting for a refresh if it needs one; returns the credentials with the generation of the
    /// session they belong to (a waiter is failed when its session ends, so a success is always that session's).
    nonisolated(nonsending) func credentialsAndGeneration(for request: RefreshStateMachine.Request) async throws
        -> (credentials: Credentials, generation: UInt64)
    {
        let waiterID = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            var generation: UInt64 = 0
            // An unsafe continuation is correct by construction here: it is either resumed right away inside
            // `enqueue` (and never stored), or stored in exactly one waiter slot. Every path that resumes a stored
            // one — cancellation, completion, deactivation, supersession — first takes it out of its slot under
            // the lock, so exactly one of them gets it, exactly once.
            let credentials = try await withVisibleUnsafeThrowingContinuation {
                (continuation: UnsafeContinuation<Credentials, any Error>) in
                generation = enqueue(
                    request, now: clock.nowSeconds(), waiterID: waiterID, continuation: .credentials(continuation))
            }
            return (credentials, generation)
        } onCancel: {
            cancelWaiter(id: waiterID)
        }
    }

    /// Resumes the waiter `id` with `CancellationError`, if it is still waiting.
    ///
    /// May run before the waiter registered; then it finds nothing, and the registering side sees
    /// `Task.isCancelled` afterwards (`enqueueForToken`) or under the same lock (`enqueue`) and resumes the
    /// continuation itself.
    private func cancelWaiter(id: UInt64) {
        modifyStateAndRunActions { $0.waiterCancelled(id: id) }
    }

    /// The token path of `enqueue`, for the common case under contention: a refresh is in flight and this caller
    /// joins it.
    ///
    /// Synchronous and never inlined: inlined into the async closure that calls it, its locals would enlarge that
    /// closure's async frame, which lives on the waiting task's allocator for as long as the caller waits.
    @inline(never)
    private func enqueueForToken(waiterID: UInt64, continuation: UnsafeContinuation<String, any Error>) {
        let now = clock.nowSeconds()
        let joined = modifyStateAndRunActions {
            $0.joinFlight(now: now, waiterID: waiterID, continuation: .token(continuation))
        }
        guard joined else {
            enqueue(.demand, now: now, waiterID: waiterID, continuation: .token(continuation))
            return
        }
        // Checked after registering, outside the lock: a cancellation that set the flag before this point either
        // ran its handler before the waiter existed (and found nothing) or already took the waiter out; taking it
        // out here resumes it exactly once in both cases. A cancellation after this point finds the waiter.
        if Task.isCancelled { cancelWaiter(id: waiterID) }
    }

    /// Decides `request` under the lock and registers, resumes or fails the continuation; returns the generation
    /// of the session it was decided for. Never inlined, for the same reason as `enqueueForToken`.
    @inline(never)
    @discardableResult
    private func enqueue(
        _ request: RefreshStateMachine.Request, now: Double, waiterID: UInt64,
        continuation: RefreshStateMachine.WaiterContinuation
    ) -> UInt64 {
        // Cancellation is read under the lock: see `cancelWaiter(id:)`.
        modifyStateAndRunActions {
            $0.requested(
                request, now: now, waiterID: waiterID, continuation: continuation, cancelled: Task.isCancelled)
        }
    }

    static func resume(_ waiters: [RefreshStateMachine.Waiter], with result: Result<Credentials, any Error>) {
        // In arrival order: waiters that are children of one task group wake up far faster in FIFO order.
        switch result {
        case .success(let credentials):
            // Token waiters get this one copy of the token: one retain each, not a copy of the credentials.
            let token = credentials.accessToken
            for waiter in waiters { waiter.continuation?.resume(returning: credentials, token: token) }
        case .failure(let error):
            for waiter in waiters { waiter.continuation?.resume(throwing: error) }
        }
    }
}
