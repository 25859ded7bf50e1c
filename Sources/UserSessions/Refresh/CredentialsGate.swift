import Foundation
import Synchronization

/// What a gate calls up to the controller that owns it: the two events of a session's credentials that end the
/// session. The gate holds its owner weakly (a refresh may outlive the controller), and calls it after every lock is
/// released. The owner is also the view the ledger tells of the identifier the gate holds (``CredentialsLedgerView``).
protocol CredentialsGateOwner: CredentialsLedgerView {
    /// A terminal refresh failure (the server refused the credentials for good) invalidates the session of
    /// `generation`.
    func credentialsRevoked(generation: UInt64) async
    /// A coordinated store said the active session's record was removed elsewhere: the session of `generation`
    /// closes (`.closed(.clearedElsewhere)`).
    func recordRemovedElsewhere(generation: UInt64) async
}

/// The single-flight gate in front of a session's credentials.
///
/// Every path that needs a token or a refresh — `accessToken()`, proactive refresh, a replay after an
/// authentication failure, `refreshCredentials()`, `restore` — goes through this one object, so however many
/// callers find the token expiring, the refresher is called once.
///
/// The rules live in ``RefreshStateMachine``, held in a `Locked` (the package's lock). Every input goes through one funnel,
/// ``modifyStateAndRunActions(_:)``: the transition runs under the lock and returns ``RefreshStateMachine/Actions``,
/// which the gate performs after releasing it: it starts refreshes in unstructured tasks (so cancelling the caller
/// that triggered one never cancels it), writes to the store (in the identifier's write turn, which the ledger
/// keeps: ``withWriteTurn(_:_:)``), emits events and resumes waiters in arrival order.
///
/// The controller calls ``activate(identifier:userInfo:credentials:generation:revision:heldFence:signingIn:)`` when a
/// session opens (before its services start) and ``deactivate()`` first thing when it closes, is replaced or becomes
/// invalid.
@usableFromInline
final class CredentialsGate: Sendable {
    /// The machine. Private: it changes only through ``modifyStateAndRunActions(ordered:_:)`` and is read only
    /// through ``inspect(_:)`` and the hot path.
    private let state: Locked<RefreshStateMachine>
    /// Waiter ids, increasing, allocated without the lock so that the cancellation handler knows its id: one counter
    /// for the process (ids need only be unique and increasing per gate), so an idle session keeps none.
    private static let waiterIDs = Atomic<UInt64>(0)
    /// When a token was last asked for, as the bit pattern of seconds since the reference date; see `noteDemand`.
    let lastDemandBits = Atomic<UInt64>(0)
    /// What the gate is tied to besides its machine, under one lock: the controller above it, whether it holds its
    /// session's identifier in the ledger, the task following the coordinated store's changes, and the work it runs
    /// in the background (see ``Links``).
    let links = Locked(Links())
    /// Whether the session clock is the system clock, kept inline (after the links' flags, with the lock below in the
    /// same word): the hot path then reads the coarse system clock without reaching the shared settings, which would
    /// retain and release that object, one cache line every task of the process shares. A custom clock (tests,
    /// simulations) is read through the settings.
    let readsSystemClock: Bool
    /// Orders the events of refreshes (started, failed, loop tripped) and of late writes against `deactivate()`:
    /// one is emitted only while its session is active, checked and emitted under this lock, which `deactivate()`
    /// takes too. So none of them ever follows the session's `.closed` or `.invalidated`. Never taken on the hot
    /// path; taken before `state`, never after it.
    let eventOrder = Locked(())
    /// The refresher, the ledger and the policy, shared with the other controllers of a registry.
    let settings: ControllerSettings
    var refresher: (any TokenRefresher)? { settings.refresher }
    var store: any TokenStore { settings.ledger.store }
    /// `store`, when it coordinates refreshes across processes: refreshes then run under its lease, writes are
    /// conditional on the revision held, and its changes are adopted while a session is active.
    var coordinatedStore: (any CoordinatedTokenStore)? { settings.ledger.coordinatedStore }
    let events: EventHub
    /// The owner of every identifier's credentials shared by the controllers of this process that use `store`.
    var ledger: CredentialsLedger { settings.ledger }
    var policy: Policy { settings.policy }
    /// The session clock: token expiry, backoffs and retry times.
    var clock: SessionClock { settings.policy.clock }

    /// The session clock's time in seconds since the reference date: the hot path's read (see ``readsSystemClock``),
    /// inlined into it as the clock's own read was.
    @inline(__always)
    func nowSeconds() -> Double {
        readsSystemClock ? SessionClock.coarseSystemSeconds() : clock.nowSeconds()
    }

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

    init(settings: ControllerSettings, events: EventHub) {
        self.settings = settings
        self.readsSystemClock = settings.policy.clock.isSystem
        self.events = events
        self.state = Locked(
            RefreshStateMachine(
                policy: settings.policy.refresh, hasRefresher: settings.refresher != nil,
                coordinated: settings.ledger.coordinatedStore != nil))
    }

    /// A gate dropped while it still holds its identifier in the ledger (its controller was released without
    /// `close()`) lets go of it there, so the entry does not outlive everyone who held it. What the ledger holds
    /// unwritten, it keeps writing on the session's clock and policy, as after a close; its failures are reported to
    /// nobody, since the session that would report them is gone.
    deinit {
        guard links.withLock({ $0.holdsIdentifier }) else { return }
        ledger.release(
            inspect { $0.identifier }, schedule: CredentialsLedger.Schedule(clock: clock, policy: policy.refresh))
    }

    /// A gate of its own settings (for tests that drive a gate without a controller).
    convenience init(
        refresher: (any TokenRefresher)?, store: any TokenStore, ledger: CredentialsLedger? = nil, events: EventHub,
        policy: Policy
    ) {
        self.init(
            settings: ControllerSettings(
                store: store, refresher: refresher, configuration: UserSessionController.Configuration(),
                ledger: ledger, policy: policy),
            events: events)
    }

    /// Sets what the gate calls up to (the controller that made it).
    func setOwner(_ owner: any CredentialsGateOwner) {
        links.withLock { $0.owner = owner }
    }

    /// The owner, if it still exists (read back as the owner it was set as: ``Links/owner``).
    private var currentOwner: (any CredentialsGateOwner)? {
        links.withLock { $0.owner } as? any CredentialsGateOwner
    }

    /// Starts serving `credentials` for a newly opened session of `generation`. A refresh still running for an
    /// earlier generation is not served to it: it runs in the ledger, which writes its rotation, and a refresh of the
    /// new session presenting the same refresh token joins it there instead of sending the token a second time.
    ///
    /// `revision` is the revision of the coordinated store's record the credentials were read from (a restore);
    /// with a coordinated store the session also follows the store's changes until ``deactivate()``.
    /// `heldFence` is the fence of a ledger hold the caller (a restore) already took for `identifier`: the gate takes
    /// that hold over instead of holding a second time. A session `signingIn` writes under no fence until its
    /// opening write lands (``writeOpening(_:identifier:)``): what it refreshes before then belongs to a sign-in
    /// that may fail.
    ///
    /// Not inlined: an opening's async frame need not hold the activation's temporaries.
    @inline(never)
    func activate(
        identifier: String, userInfo: UserInfo, credentials: Credentials?, generation: UInt64,
        revision: UInt64? = nil, heldFence: UInt64? = nil, signingIn: Bool = false
    ) {
        stopWatchingStore()
        events.setGeneration(generation)
        let fence = heldFence ?? ledger.hold(identifier, view: currentOwner)
        // The identifier held before is the machine's until the transition below replaces it.
        let heldBefore = links.withLock { links in
            defer { links.holdsIdentifier = true }
            return links.holdsIdentifier
        }
        if heldBefore { releaseSessionIdentifier() }
        modifyStateAndRunActions {
            $0.activated(
                identifier: identifier, userInfo: userInfo, credentials: credentials, generation: generation,
                revision: revision, heldFence: fence, signingIn: signingIn)
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
    /// A refresh in flight is no longer the session's: its result is never served, published or announced, and the
    /// ledger writes its rotation to the identifier's record. A write that overran both
    /// deadlines loses the identifier's write turn (so later writes are not blocked for ever); if it lands later,
    /// the ledger repairs what it changed
    /// (``CredentialsLedger/writeFinished(_:fence:wrote:replacing:failed:schedule:turn:leavesTurn:)``).
    func deactivate() async {
        // Ordered: no event of a refresh or background write of this session is emitted after this transition.
        modifyStateAndRunActions(ordered: true) { $0.deactivated() }
        stopWatchingStore()
        defer { releaseLedgerHold() }
        let identifier = inspect { $0.identifier }
        // The common close: no write is in progress or waiting and nothing is unwritten, so the final flush has
        // nothing to wait for or write. It ends here, without a task or a deadline timer.
        if identifier.isEmpty || ledger.isSettled(identifier) {
            modifyStateAndRunActions { $0.finalFlushBegan(unwritten: nil) }
            return
        }
        let (timeout, deadlineClock) = (policy.storeTimeout, policy.deadlineClock)
        // Numbered like the background tasks: a flush started later has a greater number.
        let number = links.withLock { $0.takeID() }
        let flush = Task { await self.finalFlush(number, identifier: identifier) }
        if await Deadline.wait(for: flush, timeout: timeout, clock: deadlineClock) { return }
        cancelBackgroundWork()
        if await Deadline.wait(for: flush, timeout: timeout, clock: deadlineClock) { return }
        // Marked abandoned under the event lock, so the flush, which checks the mark under it, reports nothing
        // later; cancelled after the lock is released, since cancelling runs the store's cancellation handlers.
        eventOrder.withLock { _ in links.withLock { links in links.modifyWork { $0.flushAbandoned = number } } }
        flush.cancel()
        // The flush waits for the identifier's write turn: a write of this gate holding it loses it.
        let stuck = links.withLock { links in
            links.heldTurns.filter { ExactIdentifier.areEqual($0.value, identifier) }.keys
        }
        for token in stuck { ledger.abandonWriteTurn(identifier, token: token) }
        events.emit(
            .persistenceFailed, session: nil,
            detail: "the token store did not finish a write within \(timeout); closing without waiting for it")
    }

    /// The last step of a shutdown, after ``deactivate()``: waits, within
    /// ``UserSessionController/Configuration/storeTimeout``, until every flight this gate started has ended and the
    /// ledger has nothing in flight and nothing owed to the store for `identifier`
    /// (``CredentialsLedger/settled(_:)``). A refresh still in flight returns and its rotation is written, so a
    /// process that exits next does not leave the store holding a refresh token the server rotated (the next process
    /// would present it, and a server that detects reuse revokes the user's sessions). The flights are waited for
    /// first: one that passed its last check before the close but has not reached the ledger yet would otherwise be
    /// missed; so is the revocation of a result a sign-out dropped, which a flight starts as it ends. Past the
    /// deadline (a store still down, a refresher that does not return) it reports `.persistenceFailed` and returns;
    /// the ledger goes on while the process lives.
    func settleBeforeExit(_ identifier: String) async {
        let running = links.withLock { !$0.running.isEmpty }
        guard !identifier.isEmpty, running || ledger.hasPendingWork(identifier) else { return }
        let settling = Task {
            // Until none is left: a flight may start a revocation as it ends. No flight starts after the close.
            while case let tasks = links.withLock({ Array($0.running.values) }), !tasks.isEmpty {
                for task in tasks { await task.value }
            }
            await ledger.settled(identifier)
        }
        links.withLock { $0.settlingBeforeExit = true }
        defer { links.withLock { $0.settlingBeforeExit = false } }
        if await Deadline.wait(for: settling, timeout: policy.storeTimeout, clock: policy.deadlineClock) { return }
        events.emit(
            .persistenceFailed, session: nil, detail: CredentialsLedger.unsettledAtShutdown(policy.storeTimeout))
    }

    /// The schedule the ledger retries the unwritten credentials of the session of `generation` on; a retry that
    /// fails is reported (`.persistenceFailed`) while that session is open.
    func ledgerSchedule(for generation: UInt64) -> CredentialsLedger.Schedule {
        CredentialsLedger.Schedule(clock: clock, policy: policy.refresh) { [weak self] error in
            self?.emitWhileActive(
                .persistenceFailed, generation: generation, detail: RefreshStateMachine.describePersistFailure(error))
        }
    }

    /// Lets go of `identifier` in the ledger, which keeps writing what it holds unwritten on the schedule of the
    /// session the gate serves now (or served last). The generation is read before the ledger's lock is taken: the
    /// schedule is made inside it, only when the ledger needs one.
    func releaseInLedger(_ identifier: String) {
        release(identifier, generation: inspect { $0.generation })
    }

    /// ``releaseInLedger(_:)`` for the identifier the machine holds: it and its session's generation come from one
    /// read of the machine.
    private func releaseSessionIdentifier() {
        let (identifier, generation) = inspect { ($0.identifier, $0.generation) }
        release(identifier, generation: generation)
    }

    private func release(_ identifier: String, generation: UInt64) {
        ledger.release(identifier, view: currentOwner, schedule: ledgerSchedule(for: generation))
    }

    /// Lets go of the identifier held in the ledger; a rotation that could not be written stays there and the
    /// ledger keeps writing it.
    private func releaseLedgerHold() {
        let held = links.withLock { links in
            defer { links.holdsIdentifier = false }
            return links.holdsIdentifier
        }
        if held { releaseSessionIdentifier() }
    }

    /// Waits for the write in progress (the identifier's write turn), then writes once more what the ledger has not
    /// written for the session's identifier, if anything (the ledger goes on retrying it after this session closed).
    private func finalFlush(_ number: UInt64, identifier: String) async {
        await withWriteTurn(identifier) { turn in
            let unwritten = ledger.unwrittenSession(identifier)
            // Cancelled once `deactivate()` stopped waiting: the session is closed without this write, and writing
            // now could land after a later `remove`.
            guard !Task.isCancelled,
                let flush = modifyStateAndRunActions({ $0.finalFlushBegan(unwritten: unwritten) }),
                let error = await write(flush, in: turn)
            else { return }
            let observed = eventOrder.withLock { _ -> EventHub.Observed? in
                guard !Task.isCancelled, links.withLock({ $0.flushAbandoned < number }) else { return nil }
                return events.record(
                    .persistenceFailed, session: nil, detail: RefreshStateMachine.describePersistFailure(error))
            }
            events.publish(observed)
        }
    }

    // MARK: - The funnel

    /// The funnel every input of the machine goes through: `input` runs under the lock and returns a value and the
    /// actions the transition calls for; the actions run after the lock is released, so no parked caller is
    /// resumed, no task started and no event emitted while it is held.
    ///
    /// `ordered` is for the inputs whose events must be ordered against ``deactivate()`` (a refresh starting or
    /// failing, an event of a background write): the transition and its events then run under ``eventOrder``
    /// too, which `deactivate()` takes for its own transition, so none of them follows the session's `.closed`.
    ///
    /// `beforeActions` runs after every lock is released and before the actions: what the parked callers must find
    /// done when they resume (a superseded commit's session taking the newest credentials).
    @discardableResult
    func modifyStateAndRunActions<Value>(
        ordered: Bool = false, beforeActions: (() -> Void)? = nil,
        _ input: (inout RefreshStateMachine) -> (Value, RefreshStateMachine.Actions)
    ) -> Value {
        guard ordered else {
            let (value, actions) = state.withLock { machine in input(&machine) }
            beforeActions?()
            run(actions)
            return value
        }
        var (value, actions, observed) = eventOrder.withLock { _ in
            let (value, actions) = state.withLock { machine in input(&machine) }
            // Recorded for subscribers under the lock (their order); waiting consumers are resumed, and observers
            // (user code) called, after it.
            let observed = actions.events.compactMap { events.record($0.kind, session: nil, detail: $0.detail) }
            return (value, actions, observed)
        }
        for observation in observed { events.publish(observation) }
        actions.events = []
        beforeActions?()
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

    // MARK: - Token requests: one path

    /// What a caller asks the gate for: the current token (``UserSessionController/accessToken()`` and
    /// ``UserSessionController/withAccessToken(_:)``) or one that stays valid long enough
    /// (``UserSessionController/accessToken(minimumValidity:)``).
    enum TokenRequest: Equatable {
        case current
        /// A token valid for at least this many seconds, refreshing (at most once) if needed.
        case minimumValidity(Double)
    }

    /// Every token request goes this one way: ``freshToken()`` first (the hot path, only for ``TokenRequest/current``),
    /// then ``waitForToken(_:)``. Returns the token with the generation of the session it belongs to (a replay
    /// stays with that session).
    ///
    /// - Throws: ``UserSessionError/Code/sessionNotOpen``; the refresh's error (with its failure class) when this
    ///   caller waited for a refresh that failed; ``UserSessionError/Code/noRefresher`` or
    ///   ``UserSessionError/Code/refreshLoop`` when an expired token cannot be refreshed;
    ///   ``UserSessionError/Code/minimumValidityUnreachable`` when the asked validity cannot be reached;
    ///   `CancellationError` at once when the calling task is cancelled while waiting (the refresh goes on and is
    ///   committed).
    nonisolated(nonsending) func token(_ request: TokenRequest = .current) async throws
        -> (token: String, generation: UInt64)
    {
        if request == .current, let fresh = freshToken() { return fresh }
        return try await waitForToken(request)
    }

    /// The current access token.
    nonisolated(nonsending) func accessToken() async throws -> String {
        try await token().token
    }

    /// The hot path: the access token (with its session's generation) if it can be handed out without waiting, or
    /// `nil`.
    ///
    /// One coarse clock read and one short critical section comparing against a precomputed deadline; no
    /// suspension and no allocation. Only past that deadline does it look further: in the soft window it still
    /// returns the token and starts one background refresh. While a refresh runs and the caller must wait for it,
    /// the same critical section says so, so that the many callers finding the token expiring together go straight
    /// to ``waitForToken(_:)``.
    @usableFromInline
    func freshToken() -> (token: String, generation: UInt64)? {
        let now = nowSeconds()
        noteDemand(now)
        let read = state.withLock { machine -> HotRead in
            if now < machine.nextActionAt { return .token(machine.token, machine.generation) }
            return machine.demandJoinsFlight(now: now) ? .mustWait : .lookFurther
        }
        switch read {
        case .token(let token, let generation): return (token, generation)
        case .mustWait: return nil
        case .lookFurther: return slowFreshToken(now: now)
        }
    }

    private enum HotRead {
        case token(String, UInt64)
        case mustWait
        case lookFurther
    }

    @inline(never)
    private func slowFreshToken(now: Double) -> (token: String, generation: UInt64)? {
        let (token, generation) = modifyStateAndRunActions { $0.tokenAsked(now: now) }
        return token.map { ($0, generation) }
    }

    /// The current access token once ``freshToken()`` found none to hand out at once: the slow half of
    /// ``UserSessionController/accessToken()``, which the caller's module inlines only up to here.
    ///
    /// This is also what every one of N callers runs when they find the token expiring together, so it is kept lean
    /// and is one async function, not a call into ``waitForToken(_:)``: the parked caller takes only the token (a
    /// `String`), joining the flight in progress takes one short critical section that copies nothing, and the
    /// cancellation flag is read outside the lock.
    @usableFromInline
    nonisolated(nonsending) func waitForCurrentToken() async throws -> (token: String, generation: UInt64) {
        let waiterID = Self.waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            var generation: UInt64 = 0
            // Answered through the machine's actions; see `credentialsAndGeneration(for:)`.
            let token = try await Parked.wait { (caller: Parked<String, any Error>) -> Result<String, any Error>? in
                generation = enqueueForToken(waiterID: waiterID, caller: caller)
                return nil
            }
            return (token, generation)
        } onCancel: {
            cancelWaiter(id: waiterID)
        }
    }

    /// The part of every token request after ``freshToken()``: wait for (or start) the refresh, or fail.
    ///
    /// ``TokenRequest/current`` is ``waitForCurrentToken()``; ``TokenRequest/minimumValidity(_:)`` waits for the
    /// credentials, whose expiry it checks.
    nonisolated(nonsending) func waitForToken(_ request: TokenRequest = .current) async throws
        -> (token: String, generation: UInt64)
    {
        switch request {
        case .current:
            return try await waitForCurrentToken()
        case .minimumValidity(let asked):
            let validity = max(0, asked)
            // Any use of the token is activity (the registry's idle eviction reads it).
            noteDemand(nowSeconds())
            let (credentials, generation) = try await credentialsAndGeneration(for: .minimumValidity(validity))
            if let expiresAt = credentials.expiresAt,
                expiresAt.timeIntervalSinceReferenceDate - nowSeconds() < validity
            {
                throw RefreshStateMachine.unreachableValidity
            }
            return (credentials.accessToken, generation)
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
        let waiterID = Self.waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            var generation: UInt64 = 0
            // The parked caller is answered through the machine's actions: either right away by `enqueue` (and
            // never stored), or from exactly one waiter slot. Every path that resumes a stored one (cancellation,
            // completion, deactivation, supersession) first takes it out of its slot under the lock, so exactly one
            // of them gets it, exactly once.
            let credentials = try await Parked.wait {
                (caller: Parked<Credentials, any Error>) -> Result<Credentials, any Error>? in
                generation = enqueue(request, now: nowSeconds(), waiterID: waiterID, caller: .credentials(caller))
                return nil
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
    /// parked caller itself.
    private func cancelWaiter(id: UInt64) {
        modifyStateAndRunActions { $0.waiterCancelled(id: id) }
    }

    /// The token path of `enqueue`, for the common case under contention: a refresh is in flight and this caller
    /// joins it.
    ///
    /// Synchronous and never inlined: inlined into the async closure that calls it, its locals would enlarge that
    /// closure's async frame, which lives on the waiting task's allocator for as long as the caller waits.
    @inline(never)
    private func enqueueForToken(waiterID: UInt64, caller: Parked<String, any Error>) -> UInt64 {
        let now = nowSeconds()
        let (joined, generation) = modifyStateAndRunActions { machine in
            let (joined, actions) = machine.tokenAwaited(
                now: now, waiter: .init(id: waiterID, continuation: .token(caller)))
            return ((joined, machine.generation), actions)
        }
        guard joined else {
            return enqueue(.demand, now: now, waiterID: waiterID, caller: .token(caller))
        }
        // Checked after registering, outside the lock: a cancellation that set the flag before this point either
        // ran its handler before the waiter existed (and found nothing) or already took the waiter out; taking it
        // out here resumes it exactly once in both cases. A cancellation after this point finds the waiter.
        if Task.isCancelled { cancelWaiter(id: waiterID) }
        return generation
    }

    /// Decides `request` under the lock and registers, resumes or fails the parked caller; returns the generation
    /// of the session it was decided for. Never inlined, for the same reason as `enqueueForToken`.
    @inline(never)
    @discardableResult
    private func enqueue(
        _ request: RefreshStateMachine.Request, now: Double, waiterID: UInt64,
        caller: RefreshStateMachine.ParkedCaller
    ) -> UInt64 {
        // Cancellation is read under the lock: see `cancelWaiter(id:)`.
        modifyStateAndRunActions {
            $0.credentialsAsked(
                request, now: now, waiter: .init(id: waiterID, continuation: caller), cancelled: Task.isCancelled)
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

/// The gate behind its controller as the ledger's view of the identifier it holds (the ledger tells the controller,
/// which the gate already references weakly, so holding it weakly costs no second side table).
extension CredentialsGate {
    /// Another controller's refresh (or credentials handed over to it) advanced the identifier's newest credentials: a
    /// session that holds credentials they replaced, with no flight of its own, takes the newest now, so it never
    /// presents the refresh token spent since, however many refreshes the other controllers make while it stays idle.
    /// One read of the machine, one of the ledger (``CredentialsLedger/news(of:identifier:fence:)``), and the
    /// transition; a session with a flight of its own gets the newest from that flight (the ledger joins it or answers
    /// it with the rotation).
    ///
    /// Also told when the newest was refused (the session ends as after its own refusal) and when the user signed out
    /// on another controller (the session closes, `.closed(.clearedElsewhere)`).
    func ledgerAdvanced(_ identifier: String) {
        let session = inspect { machine -> (generation: UInt64, fence: UInt64, held: Credentials?)? in
            guard machine.active, ExactIdentifier.areEqual(machine.identifier, identifier) else { return nil }
            return (machine.generation, machine.ledgerFence, machine.flights.isRefreshing ? nil : machine.credentials)
        }
        guard let session, let news = ledger.news(of: session.held, identifier: identifier, fence: session.fence)
        else { return }
        switch news {
        case .signedOut:
            // Signed out on another controller of this process: the session closes as when a coordinated store's
            // record was removed elsewhere (its flight, if any, is dropped; nothing is written back).
            let ended = modifyStateAndRunActions { $0.recordRemoved(generation: session.generation) }
            if ended, let owner = currentOwner {
                Task { await owner.recordRemovedElsewhere(generation: session.generation) }
            }
        case .refused:
            // Refused for good on another controller: this session's refreshes end as after its own refusal, and the
            // controller invalidates it.
            guard let held = session.held,
                let generation = modifyStateAndRunActions({ $0.entryRefused(held, generation: session.generation) }),
                let owner = currentOwner
            else { return }
            Task { await owner.credentialsRevoked(generation: generation) }
        case .advanced(let newest, let refreshedOnly):
            guard let held = session.held else { return }
            // Ordered against `deactivate()`: the event never follows the session's `.closed`.
            modifyStateAndRunActions(ordered: true) {
                $0.entryAdvanced(
                    to: newest, from: held, refreshedOnly: refreshedOnly, generation: session.generation)
            }
        case .backedOff(let backoff):
            // Another controller's refresh of the same credentials failed for a while: this session backs off with
            // it instead of asking the failing server again.
            guard let held = session.held else { return }
            modifyStateAndRunActions { $0.entryBackedOff(backoff, held: held, generation: session.generation) }
        }
    }
}

/// Reads that are tied to one session: a replay stays with the session whose token failed.
extension CredentialsGate {
    /// After an operation using `token` of the session of `generation` failed authentication: the credentials to
    /// replay with. If `token` is still current they come from a forced single-flight refresh; otherwise the
    /// current ones are returned as is. Throws ``UserSessionError/Code/sessionNotOpen`` when that session is no
    /// longer the active one, so a replay never runs with another session's credentials.
    nonisolated(nonsending) func replacementCredentials(after token: String, generation: UInt64) async throws
        -> Credentials
    {
        try await credentials(for: .replay(replacing: token, generation: generation))
    }
}

extension CredentialsGate {
    /// The flight over a ``CoordinatedTokenStore``: everything from reading the record to committing runs under
    /// the store's refresh lease for the identifier, so at most one process at a time presents a refresh token.
    ///
    /// Under the lease the record is read first. A record with a newer revision and other credentials than the
    /// ones this flight would send means another process already rotated them: they are adopted and the refresher
    /// is not called. Otherwise the refresher is called and its credentials are committed with a write
    /// conditional on the revision held (``conditionalWrite(_:store:overwrite:)``), still under the lease. A
    /// record that is gone means the session was cleared elsewhere: nothing is sent or written, and the session
    /// closes. Either adoption acts on the record read again in the identifier's write turn, not on the first read:
    /// a write of this process (a sign-in storing the record found missing) may have landed while the flight waited
    /// for the turn.
    func runLeasedFlight(
        _ job: RefreshStateMachine.RefreshJob, store: any CoordinatedTokenStore, startedAt: ContinuousClock.Instant
    ) async {
        let identifier = inspect { $0.identifier }
        do {
            try await store.withRefreshLease(identifier: identifier) {
                await self.flightUnderLease(job, identifier: identifier, store: store, startedAt: startedAt)
            }
        } catch {
            // The lease could not be taken (the store failed, or the flight was cancelled while waiting): nothing
            // was sent, so this is a failure like a transient one.
            await finish(job, outcome: .failure(Self.classify(error)), startedAt: startedAt)
        }
    }

    private func flightUnderLease(
        _ job: RefreshStateMachine.RefreshJob, identifier: String, store: any CoordinatedTokenStore,
        startedAt: ContinuousClock.Instant
    ) async {
        // While this flight waited for the lease it may have been superseded (an adoption) or its session may have
        // ended: it has sent nothing, so it sends nothing now.
        guard stillCurrent(job) else { return }
        let record: RevisedSession?
        do {
            record = try await store.loadRevised(identifier: identifier)
        } catch {
            await finish(job, outcome: .failure(Self.classify(error)), startedAt: startedAt)
            return
        }
        if let record, recordsRefusal(record, job) {
            // Another process's refresh was refused and it recorded that: the refresh token this flight would send,
            // or the newer one the record holds, must not be presented again. The flight fails as a restore of the
            // record does, and the session is invalidated.
            await finish(job, outcome: .failure(CredentialsLedger.refusedError), startedAt: startedAt)
            return
        }
        if storeReplaces(record, job) {
            // What the flight acts on in the turn is read in the turn: the record read above may be older than a
            // write of this process that held the turn meanwhile (a sign-in storing the record found missing, an
            // update), and adopting it, or its absence, would undo that write here.
            let adoption = await withWriteTurn(identifier) { turn -> Result<Adoption, UserSessionError> in
                let record: RevisedSession?
                do {
                    record = try await store.loadRevised(identifier: identifier)
                } catch {
                    return .failure(Self.classify(error))
                }
                guard storeReplaces(record, job) else { return .success(Adoption.none) }
                return .success(adoptHoldingTurn(record, generation: job.generation, turn: turn))
            }
            switch adoption {
            case .failure(let error):
                await finish(job, outcome: .failure(error), startedAt: startedAt)
                return
            case .success(.none):
                // The session changed while this flight read the record, or the record read in the turn no longer
                // replaces what the flight holds: the flight is stale, or (its session still active) refreshes after
                // all, so its waiters never hang.
                guard inspect({ $0.isCurrent(flightID: job.flightID) }) else { return }
            case .success(let adoption):
                await finishAdoption(adoption, generation: job.generation)
                return
            }
        }
        // Checked once more right before sending: a change notification may have adopted the record another
        // process wrote (superseding this flight) while the record was read here; the refresh token this flight
        // holds is then spent, and presenting it again would be a reuse that revokes the whole token family.
        guard stillCurrent(job) else { return }
        let returned = await callRefresher(job.credentials, for: job)
        await finish(job, outcome: returned.result, turn: returned.turn, startedAt: startedAt)
        if case .success(let rotated) = returned.result, let record {
            await keepLeasePromise(rotated, over: record, identifier: identifier, store: store, job: job)
        }
    }

    /// The lease's promise to its next holder, in this process or another: the record it reads first holds what the
    /// refresh made under the lease produced (`rotated`, from the credentials of `record`, read under the lease).
    ///
    /// The commit writes it, unless the session's writes are fenced in this process (a later sign-in or sign-out
    /// here) while the session took a newer record from a change notification and refreshed that: its result is
    /// then this process's knowledge only, or the ledger's to write later. But the record read under the lease is
    /// what every other process presents next, so while the store still holds that very revision (no write, sign-in
    /// or sign-out landed since, here or elsewhere), the result is written over it, conditionally on it, before the
    /// lease goes. Otherwise whatever landed since stands. A commit the store refused is not written again here: its
    /// retry is the ledger's.
    private func keepLeasePromise(
        _ rotated: Credentials, over record: RevisedSession, identifier: String, store: any CoordinatedTokenStore,
        job: RefreshStateMachine.RefreshJob
    ) async {
        // The common case costs no read: the commit wrote, and the session holds the revision it produced.
        if let held = inspect({ $0.heldRevision }), held > record.revision { return }
        // The store refused the commit's own write (it is down): the ledger retries it on its schedule, as for any
        // refused write; the next holder meanwhile reads the spent token, which no instance can prevent.
        if ledger.holdsUnwritten(identifier, rotated, fence: job.ledgerFence) { return }
        guard record.session.credentials == job.credentials,
            let now = try? await store.loadRevised(identifier: identifier), now.revision == record.revision
        else { return }
        var session = record.session
        session.credentials = rotated
        _ = try? await store.save(session, identifier: identifier, expectedRevision: record.revision)
    }

    /// Whether the leased flight `job` must adopt `record` instead of refreshing: a newer record with other
    /// credentials than it would send, or none (removed elsewhere).
    private func storeReplaces(_ record: RevisedSession?, _ job: RefreshStateMachine.RefreshJob) -> Bool {
        guard let record else { return true }
        return inspect { $0.storeIsNewer(record, than: job.credentials, generation: job.generation) }
    }

    /// Whether `record` says the refresh token `job` would send was refused for good: it is marked refused and holds
    /// that very token, or credentials that replace the ones `job` holds (another process rotated them, and the
    /// rotation was refused).
    private func recordsRefusal(_ record: RevisedSession, _ job: RefreshStateMachine.RefreshJob) -> Bool {
        inspect { $0.storeRefuses(record, job.credentials, generation: job.generation) }
    }

    /// Whether `job` is still the session's flight; a superseded or ended one is forgotten (it has sent nothing).
    private func stillCurrent(_ job: RefreshStateMachine.RefreshJob) -> Bool {
        modifyStateAndRunActions { $0.flightProceeds(flightID: job.flightID, announcing: false) }
    }
}

extension CredentialsGate {
    /// Runs a refresh in an unstructured task, so that no caller's cancellation can cancel it: a rotated refresh
    /// token must always be committed.
    func startFlight(_ job: RefreshStateMachine.RefreshJob) {
        runInBackground {
            // Measured as one operation; how it ended reaches the observers from inside (`reportFlight`).
            await self.settings.configuration.instrumentation.measure(.refresh) { await self.runFlight(job) }
        }
    }

    private func runFlight(_ job: RefreshStateMachine.RefreshJob) async {
        // Announced only while the flight is current, ordered against `deactivate()`. A flight that ended before
        // it got here has sent nothing, so it does not call the refresher at all.
        let started = modifyStateAndRunActions(ordered: true) {
            $0.flightProceeds(flightID: job.flightID, announcing: true)
        }
        guard started else { return }
        let startedAt = ContinuousClock.now
        if let coordinatedStore {
            await runLeasedFlight(job, store: coordinatedStore, startedAt: startedAt)
            return
        }
        let returned = await callRefresher(job.credentials, for: job)
        if case .failure(let error) = returned.result, error.failureClass == .terminal {
            await finishRefused(job, returned, startedAt: startedAt)
        } else {
            await finish(job, outcome: returned.result, turn: returned.turn, startedAt: startedAt)
        }
    }

    /// Finishes a flight over a store without coordination whose refresh was refused for good (`returned`). The
    /// fallback for such stores: another process may already have rotated the refresh token it sent (a server with a
    /// reuse grace period answered `invalid_grant`). What that process stored is adopted, refreshed once with it when
    /// it is expired too; otherwise the refusal stands. In a function of its own: the flight's frame need not hold it.
    private func finishRefused(
        _ job: RefreshStateMachine.RefreshJob,
        _ refused: (result: Result<Credentials, UserSessionError>, turn: CredentialsLedger.TurnGrant?),
        startedAt: ContinuousClock.Instant
    ) async {
        var returned = refused
        if let stored = await storedReplacement(for: job) {
            if !stored.credentials.isExpired(at: clock.now()) {
                let adoption = await withWriteTurn(job.identifier) { turn in
                    adoptHoldingTurn(
                        RevisedSession(session: stored.session, revision: 0), generation: job.generation, turn: turn)
                }
                if case .none = adoption {
                    await finish(job, outcome: returned.result, turn: returned.turn, startedAt: startedAt)
                } else {
                    await finishAdoption(adoption, generation: job.generation)
                }
                return
            }
            returned = await callRefresher(stored.credentials, for: job)
        }
        await finish(job, outcome: returned.result, turn: returned.turn, startedAt: startedAt)
    }

    /// Refreshes `credentials` for `job`'s identifier through the ledger: once per refresh token in the process (a
    /// refresh of another controller presenting the same token is joined, a token already rotated gets the
    /// rotation, a refused one fails at once, and credentials older than a refresh's result get that result).
    ///
    /// A refresh this gate ran that succeeded comes back holding the identifier's write turn when it was free
    /// (taken in the ledger's critical section that recorded the rotation), for its commit.
    func callRefresher(_ credentials: Credentials, for job: RefreshStateMachine.RefreshJob) async
        -> (result: Result<Credentials, UserSessionError>, turn: CredentialsLedger.TurnGrant?)
    {
        let identifier = job.identifier
        var revoke: (@Sendable (Credentials) -> Void)?
        if SignOutRevocation.isEnabled(settings.configuration, refresher) {
            revoke = { dropped in self.revokeDropped(dropped, of: identifier) }
        }
        return await ledger.refreshTakingTurn(
            identifier: identifier, userInfo: job.userInfo, credentials: credentials, fence: job.ledgerFence,
            heldFence: job.heldFence, takingTurn: true,
            backoff: CredentialsLedger.BackoffTerms(
                clock: clock, policy: policy.refresh, stopsRequest: job.kind != .forced),
            revokingDropped: revoke
        ) {
            await callRefresher(credentials)
        }
    }

    /// A refresh this gate led returned after a sign-out of `identifier` dropped its result (`dropped`): the sign-out
    /// revoked the credentials the session held, which the refresh had spent already, so the grant may still be
    /// alive at the server with these tokens, which nobody keeps. They are revoked too, in the background, within
    /// ``UserSessionController/Configuration/revocationTimeout``; a failure is reported with `.revocationFailed`.
    private func revokeDropped(_ dropped: Credentials, of identifier: String) {
        let (refresher, store, configuration, events) = (refresher, store, settings.configuration, events)
        // In the background work, so a shutdown waits for it (``settleBeforeExit(_:)``).
        runInBackground {
            guard
                let failure = await SignOutRevocation.run(
                    refresher: refresher, credentials: dropped, identifier: identifier, store: store,
                    configuration: configuration)
            else { return }
            events.emit(.revocationFailed(failure.failureClass), session: nil, detail: failure.detail)
        }
    }

    /// Calls the refresher (or fails without one).
    private func callRefresher(_ credentials: Credentials) async -> Result<Credentials, UserSessionError> {
        guard let refresher else {
            return .failure(
                UserSessionError(.noRefresher, "no refresher is configured", failureClass: .misconfiguration))
        }
        do {
            return .success(try await refresher.refresh(credentials))
        } catch {
            return .failure(Self.classify(error))
        }
    }

    /// Commits or fails the flight with what the refresher returned (the commit in `turn`, when the refresh came
    /// back holding the write turn), and reports it.
    ///
    /// Not inlined: the flight's async frame need not hold the commit's or the failure's state.
    @inline(never)
    func finish(
        _ job: RefreshStateMachine.RefreshJob, outcome: Result<Credentials, UserSessionError>,
        turn: CredentialsLedger.TurnGrant? = nil, startedAt: ContinuousClock.Instant
    ) async {
        let waiters: Int?
        switch outcome {
        case .success(let credentials):
            waiters = await commit(job, credentials, turn: turn)
        case .failure(let error):
            if let turn { ledger.leaveWriteTurn(job.identifier, token: turn.token) }
            waiters = await fail(job, error)
        }
        reportFlight(job, outcome: outcome, waiters: waiters, duration: ContinuousClock.now - startedAt)
    }

    /// For a store without coordination, after `invalid_grant`: the stored session when it holds credentials
    /// with another refresh token than the one `job` sent (and the flight is still the session's), else `nil`.
    private func storedReplacement(for job: RefreshStateMachine.RefreshJob) async
        -> (session: StoredSession, credentials: Credentials)?
    {
        let identifier = inspect { $0.identifier }
        guard let stored = try? await store.load(identifier: identifier), let credentials = stored.credentials,
            inspect({
                $0.mayRetryWithStored(
                    flightID: job.flightID, identifier: identifier, sent: job.credentials, stored: credentials)
            })
        else { return nil }
        return (stored, credentials)
    }

    /// Tells the observers how a flight ended (`waiters` is `nil` for a stale flight).
    private func reportFlight(
        _ job: RefreshStateMachine.RefreshJob, outcome: Result<Credentials, UserSessionError>, waiters: Int?,
        duration: Duration
    ) {
        guard !events.observers.isEmpty else { return }
        var report = UserSessionRefreshReport(
            identifier: events.session.identifier, generation: job.generation, outcome: .discarded,
            duration: duration, waiters: waiters ?? 0)
        if waiters != nil {
            switch outcome {
            case .success: report.outcome = .succeeded
            case .failure(let error):
                report.outcome = .failed
                report.failureClass = error.failureClass ?? .transient
            }
        }
        events.observers.notify { $0.observeRefresh(report) }
    }

    /// Maps what a refresher threw onto a failure class.
    static func classify(_ error: any Error) -> UserSessionError {
        if let error = error as? UserSessionError {
            if error.failureClass != nil { return error }
            return UserSessionError(
                .refreshFailed, "refresh failed: \(error.message)", failureClass: .transient, underlying: error)
        }
        if error is CancellationError {
            return UserSessionError(
                .refreshFailed, "the refresh was cancelled", failureClass: .cancelled, underlying: error)
        }
        // Other errors may print secrets; only their type is described.
        return UserSessionError(
            .refreshFailed, "the refresher threw \(String(describing: type(of: error)))", failureClass: .transient,
            underlying: error)
    }

    /// Returns how many waiters got the failure, or `nil` when the flight was stale.
    private func fail(_ job: RefreshStateMachine.RefreshJob, _ error: UserSessionError) async -> Int? {
        let now = nowSeconds()
        let jitter = Double.random(in: 0...1)
        // A transient failure backs off every holder of the credentials alike: by the backoff the ledger keeps.
        let shared =
            error.failureClass == .transient
            ? ledger.backoff(job.identifier, sending: job.credentials.refreshToken) : nil
        let report = modifyStateAndRunActions(ordered: true) {
            $0.refreshFailed(flightID: job.flightID, error: error, now: now, jitter: jitter, shared: shared)
        }
        guard let report else { return nil }
        if let generation = report.invalidates, let owner = currentOwner {
            await owner.credentialsRevoked(generation: generation)
        }
        return report.waiters
    }

    /// Commit order: persist, publish to readers, emit, resume waiters. A flight that became stale at any point
    /// (deactivated, replaced, superseded) publishes nothing; its rotation is the ledger's to write (unless the
    /// identifier signed out or in since), silently. Returns how many waiters got the credentials, or `nil` when the
    /// flight was stale.
    ///
    /// The commit writes in the identifier's write turn: `granted` when the refresh came back holding it, else it
    /// waits for it. When the turn was free it takes two critical sections of the ledger's entry (the one that
    /// recorded the rotation and granted the turn, and the one that lands the write and hands the turn on) and two of
    /// the gate (the target, ``RefreshStateMachine/refreshReturned(flightID:newCredentials:)``, and the publication,
    /// ``RefreshStateMachine/commitWritten(flightID:newCredentials:revision:persistError:now:jitter:)``), for a plain
    /// and a coordinated store alike. The publication is ordered against `deactivate()` (its events are recorded
    /// under the event lock `deactivate()` takes), so no event of a commit follows the session's end even though the
    /// turn, which the final flush waits for, is handed on before it.
    ///
    /// A commit that waited for the turn writes nothing when the store already holds its very record (the refresh
    /// was another controller's, joined or answered with its rotation, and that controller's write landed it), nor
    /// when the ledger knows newer credentials reached from its record (another controller's update replaced what the
    /// refresh presented while it ran, which then comes back without the turn, or another refresh went on from its
    /// result): an older version is never written over the newest. The ledger checks both and leaves the turn in one
    /// section (``CredentialsLedger/leaveIfNothingToWrite(_:_:turn:)``). The commit still publishes only after the
    /// write that held the turn before it, so the order above holds for it too.
    private func commit(
        _ job: RefreshStateMachine.RefreshJob, _ credentials: Credentials, turn granted: CredentialsLedger.TurnGrant?
    ) async -> Int? {
        // A stale flight publishes nothing: nobody here writes its rotation; the ledger does, now, unless the store has
        // it (or the identifier signed out or in since).
        func stale(_ job: RefreshStateMachine.RefreshJob) async -> Int? {
            await ledger.ensureWritten(job.identifier, schedule: ledgerSchedule(for: job.generation))
            return nil
        }
        let turn: CredentialsLedger.TurnGrant
        if let granted {
            turn = granted
        } else {
            // A flight that is stale already takes no turn (a flight never becomes current again): nothing here writes
            // its rotation, and a turn taken for nothing could bring back the entry of an identifier every holder let
            // go since.
            guard inspect({ $0.isCurrent(flightID: job.flightID) }) else { return await stale(job) }
            turn = await ledger.takeWriteTurn(job.identifier)
        }
        noteHeld(turn, of: job.identifier)
        guard let target = inspect({ $0.refreshReturned(flightID: job.flightID, newCredentials: credentials) }) else {
            noteLeft(turn)
            ledger.leaveWriteTurn(job.identifier, token: turn.token)
            return await stale(job)
        }
        let written: WriteOutcome
        var nothingToWrite: CredentialsLedger.NothingToWrite?
        if granted == nil, target.baseRevision == nil, turn.fence == target.ledgerFence {
            nothingToWrite = ledger.leaveIfNothingToWrite(target.identifier, target.stored, turn: turn)
        }
        if nothingToWrite != nil {
            // A refresh this gate joined (or was answered): its leader's write already landed this very record. Or
            // credentials the entry knows newer ones of (another controller's update replaced what it refreshed while
            // it ran, or another refresh went on from its result): published here but never written over the newest,
            // and then replaced by it here too.
            written = .written(revision: nil)
        } else {
            written = await performWrite(target, in: turn, leavesTurn: true)
        }
        let probe = noteLeft(turn)
        if case .superseded(let record) = written {
            // A coordinated store held a newer record (or none): it stands, and is adopted instead, in the turn.
            // None: the user signed out in another process, which revoked what it had stored, spent by this very
            // refresh. Its result is dropped here, and revoked like any result a sign-out dropped (by each session
            // that joined the refresh too: a second revocation of the same tokens changes nothing).
            if record == nil, SignOutRevocation.isEnabled(settings.configuration, refresher) {
                revokeDropped(credentials, of: job.identifier)
            }
            let adoption = adoptHoldingTurn(record, generation: job.generation, turn: turn)
            ledger.leaveWriteTurn(job.identifier, token: turn.token)
            if case .none = adoption {
                // Only a store whose revisions went backwards gets here: the flight's waiters must not hang.
                return await fail(
                    job,
                    UserSessionError(
                        .revisionConflict, "the token store's record changed during the refresh",
                        failureClass: .transient))
            }
            await finishAdoption(adoption, generation: job.generation)
            return nil
        }
        // The turn is handed on; a test may hold the commit here, before it publishes.
        if let probe { await probe.commitLanded() }
        let now = nowSeconds()
        let jitter = Double.random(in: 0...1)
        // Superseded: the session takes the newest before the flight's waiters resume, so none of them (nor anything
        // it does next) sees the session hold what the entry replaced.
        let takeNewest: (() -> Void)? =
            if case .superseded = nothingToWrite { { self.ledgerAdvanced(job.identifier) } } else { nil }
        return modifyStateAndRunActions(ordered: true, beforeActions: takeNewest) { machine in
            machine.commitWritten(
                flightID: job.flightID, newCredentials: credentials, revision: written.revision,
                persistError: written.error, now: now, jitter: jitter)
        }
    }
}

extension CredentialsGate {
    /// Performs `actions` (never under the state lock).
    func run(_ actions: RefreshStateMachine.Actions) {
        if let (generation, detail) = actions.loopTripped {
            emitWhileActive(.refreshLoopTripped, generation: generation, detail: detail)
        }
        emit(actions.events)
        if let (continuation, result) = actions.caller {
            switch result {
            case .success(let credentials):
                continuation?.resume(returning: credentials, token: credentials.accessToken)
            case .failure(let error): continuation?.resume(throwing: error)
            }
        }
        if !actions.waiters.isEmpty { Self.resume(actions.waiters, with: actions.waitersResult) }
        if let job = actions.refresh { startFlight(job) }
    }

    func emit(_ events: [RefreshStateMachine.Actions.Event]) {
        for event in events { self.events.emit(event.kind, session: nil, detail: event.detail) }
    }

    /// Emits `kind` if the session of `generation` is still active, ordered against `deactivate()`.
    func emitWhileActive(_ kind: UserSessionEvent.Kind, generation: UInt64, detail: String?) {
        modifyStateAndRunActions(ordered: true) { machine in
            machine.isActive(generation: generation) ? .init(events: [.init(kind: kind, detail: detail)]) : .none
        }
    }
}

extension CredentialsGate {
    // MARK: - The write turn

    /// Runs `body` holding `identifier`'s write turn in the ledger (every write of the identifier made in this
    /// process runs in it, one at a time in arrival order), and leaves it when `body` returns or throws. `body` gets
    /// the turn, for ``write(_:in:)``.
    ///
    /// While it holds the turn the gate records it, so that a `deactivate()` whose final flush waits behind a write
    /// of this gate that overran both deadlines takes the turn away from it. It runs on the caller's executor, so an
    /// actor can hold the turn while it works on its own state (the controller activates an opening session inside
    /// it).
    nonisolated(nonsending) func withWriteTurn<Value>(
        _ identifier: String, _ body: (CredentialsLedger.TurnGrant) async throws -> Value
    ) async rethrows -> Value {
        let turn = await ledger.takeWriteTurn(identifier)
        noteHeld(turn, of: identifier)
        defer {
            noteLeft(turn)
            ledger.leaveWriteTurn(identifier, token: turn.token)
        }
        return try await body(turn)
    }

    /// Records that a write of this gate holds `turn` of `identifier`, for `deactivate()` to take it away when it
    /// overruns both deadlines.
    private func noteHeld(_ turn: CredentialsLedger.TurnGrant, of identifier: String) {
        links.withLock { $0.modifyWork { $0.heldTurns[turn.token] = identifier } }
    }

    /// The write holding `turn` leaves it (or has left it), and can no longer be taken away. Returns the probe of the
    /// background work, if a test installed one (read in the same section).
    @discardableResult
    private func noteLeft(_ turn: CredentialsLedger.TurnGrant) -> (any BackgroundWorkProbe)? {
        // The work, with nothing left in it, is dropped: a session idle after its opening write keeps none.
        links.withLock { links in
            links.modifyWork { work in
                work.heldTurns.removeValue(forKey: turn.token)
                return work.probe
            }
        }
    }

    /// Writes `target` to the store holding its identifier's write `turn`; returns the error when the write failed.
    ///
    /// With a ``CoordinatedTokenStore`` the write is conditional on the revision the session holds; see
    /// ``writeOutcome(_:in:kind:)``, which also says when the store held something newer.
    func write(_ target: RefreshStateMachine.PersistTarget, in turn: CredentialsLedger.TurnGrant) async -> (any Error)?
    {
        await performWrite(target, in: turn).error
    }

    /// Like ``write(_:in:)``, telling a write that was superseded by a newer record in a coordinated store (which is
    /// left as it is) from one that was written or failed.
    func writeOutcome(
        _ target: RefreshStateMachine.PersistTarget, in turn: CredentialsLedger.TurnGrant, kind: WriteKind = .own,
        replacing: Credentials? = nil
    ) async -> WriteOutcome {
        let outcome = await performWrite(target, in: turn, kind: kind, replacing: replacing)
        if let revision = outcome.revision { modifyStateAndRunActions { $0.recordWritten(target, revision: revision) } }
        return outcome
    }

    /// The store call of a write made holding its identifier's write turn: the ledger refuses a write taken before a
    /// sign-out or a sign-in of its identifier (the turn's fence is not the target's), orders it with every other
    /// write of the identifier in this process, and learns what landed (and repairs a late landing: see
    /// ``CredentialsLedger/writeFinished(_:fence:wrote:replacing:failed:schedule:turn:leavesTurn:)``).
    ///
    /// With `leavesTurn` (a commit) the write leaves the turn in the ledger's critical section that learns how it
    /// landed; a write superseded by a newer record keeps it, for its caller to adopt that record in it. The revision
    /// a conditional write produced is returned in the outcome for the caller to apply (the session holds it from
    /// then on): a commit applies it in its last critical section.
    ///
    /// Credentials handed over say what they replace (`replacing`, what the session held): the section that learns
    /// they landed maps it to them, so no refresh of the replaced credentials can lead between the two.
    private func performWrite(
        _ target: RefreshStateMachine.PersistTarget, in turn: CredentialsLedger.TurnGrant, kind: WriteKind = .own,
        replacing: Credentials? = nil, leavesTurn: Bool = false
    ) async -> WriteOutcome {
        guard turn.fence == target.ledgerFence else {
            if leavesTurn { ledger.leaveWriteTurn(target.identifier, token: turn.token) }
            return .failed(UserSessionError(.sessionNotOpen, "the user signed out; the write was dropped"))
        }
        var outcome: WriteOutcome
        do {
            if let coordinated = coordinatedStore {
                // Every write to a coordinated store is conditional: on the revision the session holds, or, with
                // none, on there being no record. A record the session never saw is read back before anything is
                // written over it.
                outcome = try await conditionalWrite(target, store: coordinated, overwrite: kind == .handedOver)
            } else {
                try await store.save(target.stored, identifier: target.identifier)
                outcome = .written(revision: nil)
            }
        } catch {
            outcome = .failed(error)
        }
        // What the store holds now, as far as this write knows: its own credentials, or a newer record's.
        let wrote: StoredSession? =
            switch outcome {
            case .written: target.stored
            case .superseded(let record): record?.session
            case .failed: nil
            }
        // No record where one was expected: the user signed out elsewhere, for every controller of this process too.
        if case .superseded(.none) = outcome { ledger.signedOut(identifier: target.identifier) }
        // The session's own credentials the store refused are the ledger's to write; credentials handed over whose
        // write failed change nothing.
        var failed: StoredSession?
        if case .failed = outcome, kind == .own { failed = target.stored }
        var superseded = false
        if case .superseded = outcome { superseded = true }
        ledger.writeFinished(
            target.identifier, fence: target.ledgerFence, wrote: wrote, replacing: superseded ? nil : replacing,
            failed: failed, schedule: ledgerSchedule(for: target.generation), turn: turn.token,
            leavesTurn: leavesTurn && !superseded)
        return outcome
    }

    // MARK: - Writes of the lifecycle

    /// The opening session's first write. The controller makes it holding the identifier's write turn
    /// (``withWriteTurn(_:_:)``), which it takes before the session's credentials become readable: nothing of the new
    /// session (a refresh commit) can then be written before it.
    func writeOpening(_ stored: StoredSession, identifier: String) async throws {
        // A sign-in, in the ledger's write turn, once the store has it: it replaces whatever the ledger held for the
        // identifier (a failed sign-in replaces nothing), no write taken before it lands after it, and this
        // session's writes are taken under the new fence.
        let (revision, fence) = try await ledger.signIn(identifier, session: stored, holdingTurn: true) {
            () async throws -> UInt64? in
            if let coordinatedStore {
                return try await Self.overwrite(stored, identifier: identifier, store: coordinatedStore)
            }
            try await store.save(stored, identifier: identifier)
            return nil
        }
        modifyStateAndRunActions { $0.signedIn(identifier: identifier, revision: revision, ledgerFence: fence) }
    }

    /// The active session's sign-in of `identifier` landed and its write turn was left: the ledger may forget what
    /// the sign-in made it keep (``CredentialsLedger/signInSettled(_:fence:holding:)``). Only while the session has no
    /// refresh in flight: one started before the sign-in landed leads under the fence held before it, which the
    /// ledger must still recognize; one started after this read leads under the sign-in's.
    func signInSettled(identifier: String) {
        let held = inspect { machine -> (fence: UInt64, credentials: Credentials?)? in
            guard machine.active, !machine.signingIn, !machine.flights.isRefreshing,
                ExactIdentifier.areEqual(machine.identifier, identifier)
            else { return nil }
            return (machine.heldFence, machine.credentials)
        }
        guard let held else { return }
        ledger.signInSettled(identifier, fence: held.fence, holding: held.credentials)
    }

    /// `closeAndClear()`'s removal of `identifier`'s record (its session is already deactivated), fenced against
    /// every write: no write taken before it can land after it.
    ///
    /// The removal waits for the ledger's write turn, so every write in progress or queued before it lands first;
    /// once the store removed the record, the ledger's fence changes: every write taken before is refused, and a
    /// refresh of the ended session that is still running writes nothing. A write that overran the close's deadline
    /// (it lost its turn) and lands after the removal is removed again
    /// (``CredentialsLedger/writeFinished(_:fence:wrote:replacing:failed:schedule:turn:leavesTurn:)``). A removal the
    /// store refused changes nothing: the user is still signed in, and the ledger still writes her newest credentials.
    func clear(identifier: String) async throws {
        try await ledger.signOut(identifier) { try await store.remove(identifier: identifier) }
    }

    /// Publishes credentials obtained elsewhere: written first, then published, then the event, then the waiters
    /// of a superseded refresh get them.
    ///
    /// If the session ends while the write is in progress, the write stands (it went to that session's own
    /// record, which a close keeps and a clear removes after it) and this returns normally; nothing is
    /// published or announced.
    ///
    /// - Throws: ``UserSessionError/Code/sessionNotOpen`` when no session is open (nothing is written); the
    ///   store's error when the write fails (then nothing changes).
    func update(_ credentials: Credentials) async throws {
        guard let identifier = inspect({ $0.active ? $0.identifier : nil }) else {
            throw RefreshStateMachine.notOpenError
        }
        let views = try await withWriteTurn(identifier) { turn in
            guard
                let (generation, target, held) = inspect({ machine in
                    machine.updateTarget(credentials).map { ($0.generation, $0.target, machine.credentials) }
                }),
                ExactIdentifier.areEqual(target.identifier, identifier)
            else {
                throw RefreshStateMachine.notOpenError
            }
            // What they replaced is learned in the section that learns they landed: no refresh of it leads after.
            let outcome = await writeOutcome(target, in: turn, kind: .handedOver, replacing: held)
            if let error = outcome.error { throw error }
            // Over a coordinated store, the record was removed elsewhere (another instance signed the user out):
            // nothing was written, the ledger learned the sign-out, and this session closes as its views do.
            if case .superseded = outcome { throw RefreshStateMachine.clearedElsewhereError }
            let views = ledger.updated(identifier, fence: target.ledgerFence)
            // Emitted holding the turn, so `deactivate()` (whose final flush waits for it) returns only after the
            // event.
            modifyStateAndRunActions { $0.credentialsUpdated(credentials, generation: generation) }
            return views
        }
        // The other controllers holding the user take them too (this one holds them already).
        for view in views { view.ledgerAdvanced(identifier) }
    }
}

/// The gate over a ``CoordinatedTokenStore``: conditional writes, adopting what another process stored, and the
/// subscription to the store's changes. Nothing here runs on the hot path.
extension CredentialsGate {
    /// Whose credentials a write carries.
    enum WriteKind {
        /// The session's own newest credentials (a refresh's commit, the final flush): when the store refuses
        /// them, the ledger keeps them as unwritten.
        case own
        /// Credentials the caller hands over (``update(_:)``): a coordinated write replaces whatever is stored, and a
        /// failed write changes nothing (the caller is told).
        case handedOver
    }

    /// How a write ended.
    enum WriteOutcome {
        /// Written; `revision` is the coordinated store's revision of the record now, when the write was conditional.
        case written(revision: UInt64?)
        case failed(any Error)
        /// A coordinated store holds a newer record than the one the write was based on (or none: it was removed
        /// elsewhere). Nothing was written; that record stands.
        case superseded(RevisedSession?)

        /// The error of a failed write; `nil` otherwise.
        var error: (any Error)? {
            if case .failed(let error) = self { return error }
            return nil
        }

        /// The revision a conditional write produced.
        var revision: UInt64? {
            if case .written(let revision) = self { return revision }
            return nil
        }
    }

    /// At most this many conditional attempts for one write (each conflict that leaves the write ours to make
    /// reloads the revision and tries again).
    static let conditionalWriteAttempts = 4

    /// Writes `target` conditionally on the revision the session holds (holding none: on there being no record).
    ///
    /// On a conflict the record is read back: a record equal to the target counts as written; a record that
    /// still holds the refresh token the session's write was based on (rewritten by someone who held nothing
    /// newer) is written over, conditionally on its revision; anything else is newer than the target (another
    /// process rotated the credentials or signed the user in again) and supersedes it; no record means the
    /// session was cleared elsewhere. With `overwrite`, whatever is stored is replaced.
    func conditionalWrite(
        _ target: RefreshStateMachine.PersistTarget, store: any CoordinatedTokenStore, overwrite: Bool
    ) async throws -> WriteOutcome {
        if overwrite {
            // Credentials handed over replace what is stored, but never bring back a record removed elsewhere.
            guard
                let revision = try await Self.overwrite(
                    target.stored, identifier: target.identifier, store: store, creating: false)
            else { return .superseded(nil) }
            return .written(revision: revision)
        }
        var expected = target.baseRevision
        for _ in 0..<Self.conditionalWriteAttempts {
            do {
                return .written(
                    revision: try await store.save(
                        target.stored, identifier: target.identifier, expectedRevision: expected))
            } catch let error as UserSessionError where error.code == .revisionConflict {
                guard let record = try await store.loadRevised(identifier: target.identifier) else {
                    return .superseded(nil)
                }
                if record.session == target.stored { return .written(revision: record.revision) }
                // A record holding a refresh token the ledger knows a refresh spent is older than the target (the
                // ledger's own retry wrote it since the session read its revision): written over, like one still
                // holding the token the session's write was based on.
                let newer = record.revision > (target.baseRevision ?? 0)
                let stored = record.session.credentials?.refreshToken
                guard
                    !newer || stored == target.baseRefreshToken
                        || stored.map({ ledger.knowsSpent($0, of: target.identifier) }) == true
                else {
                    return .superseded(record)
                }
                expected = record.revision
            }
        }
        throw UserSessionError(
            .storeFailure, "the stored record kept changing during \(Self.conditionalWriteAttempts) conditional writes")
    }

    /// Replaces whatever is stored under `identifier` with `stored`, conditionally on the revision read just
    /// before (so a concurrent writer makes it try again, never interleave); returns the new revision.
    ///
    /// Unless `creating` (a sign-in), only a record that exists is replaced: with none, nothing is written and `nil`
    /// is returned. Credentials handed over to a session whose record was removed elsewhere (another instance signed
    /// the user out) must not bring it back.
    static func overwrite(
        _ stored: StoredSession, identifier: String, store: any CoordinatedTokenStore, creating: Bool = true
    ) async throws -> UInt64? {
        var expected: UInt64?
        do {
            expected = try await store.loadRevised(identifier: identifier)?.revision
            if expected == nil, !creating { return nil }
        } catch let error as UserSessionError
            where error.code == .storeCorrupt || error.code == .unsupportedFormatVersion
        {
            // Unreadable data is replaced, as a plain save always did; its revision is read back.
            try await store.save(stored, identifier: identifier)
            return try await store.loadRevised(identifier: identifier)?.revision ?? 0
        }
        // Every attempt but the last retries a conflict with the revision read again; the last one throws it.
        for _ in 1..<conditionalWriteAttempts {
            do {
                return try await store.save(stored, identifier: identifier, expectedRevision: expected)
            } catch let error as UserSessionError where error.code == .revisionConflict {
                expected = try await store.loadRevised(identifier: identifier)?.revision
                if expected == nil, !creating { return nil }
            }
        }
        return try await store.save(stored, identifier: identifier, expectedRevision: expected)
    }

    // MARK: - Adopting what the store holds

    /// What adopting a record (or its absence) did.
    enum Adoption {
        case none
        /// Credentials were adopted (the event emitted, the waiters resumed).
        case adopted
        /// The record was removed elsewhere (the waiters failed): the session must close.
        case removed
        /// The record says the session's credentials were refused for good elsewhere (the waiters failed): the
        /// session must be invalidated when `invalidates`, and `views`, the identifier's views in this process, told.
        case refused(identifier: String, invalidates: Bool, views: [any CredentialsLedgerView])
    }

    /// While holding the identifier's write `turn`: adopts `record` (newer credentials another process stored) for
    /// the session of `generation`; for `nil`, stops that session because its record was removed elsewhere; for a
    /// record marked refused that holds the session's refresh token or replaces its credentials
    /// (``RefreshStateMachine/storeRefuses(_:_:generation:)``), ends it as after its own refusal. Hand the result to
    /// ``finishAdoption(_:generation:)`` after leaving the turn.
    ///
    /// Either way the ledger learns it first, like a write that landed: a removed record is a sign-out, a refusal is
    /// recorded as if met here (``CredentialsLedger/refusedElsewhere(_:_:replacing:fence:turn:)``), and adopted
    /// credentials are what the store holds (``CredentialsLedger/adopted(_:_:fence:turn:schedule:)``, under the
    /// session's fence), so a refresh of them is a refresh of the identifier's newest, never taken for one of
    /// replaced credentials (its rotation unwritten, its refusal unrecorded). The ledger learns it before the session
    /// publishes the credentials, so no refresh of them can return before it.
    func adoptHoldingTurn(_ record: RevisedSession?, generation: UInt64, turn: CredentialsLedger.TurnGrant)
        -> Adoption
    {
        guard let record else {
            // Signed out elsewhere (another instance removed the record): fenced here too.
            if let identifier = inspect({ $0.generation == generation ? $0.identifier : nil }) {
                ledger.signedOut(identifier: identifier)
            }
            let removed = modifyStateAndRunActions { $0.recordRemoved(generation: generation) }
            return removed ? .removed : .none
        }
        let refusal = inspect { machine -> (identifier: String, fence: UInt64, held: Credentials?)? in
            guard machine.storeRefuses(record, machine.credentials, generation: generation) else { return nil }
            return (machine.identifier, machine.ledgerFence, machine.credentials)
        }
        if let refusal {
            // Another instance had these credentials (or the ones it rotated them to) refused for good and marked the
            // record: the ledger learns the refusal as if this process had met it, and this session ends as after its
            // own refusal, now rather than at its next refresh.
            let views = ledger.refusedElsewhere(
                refusal.identifier, record.session, replacing: refusal.held, fence: refusal.fence, turn: turn.token)
            let invalidates = modifyStateAndRunActions { $0.recordRefused(generation: generation) }
            return .refused(identifier: refusal.identifier, invalidates: invalidates, views: views)
        }
        let adopting = inspect { machine -> (identifier: String, fence: UInt64)? in
            guard machine.storeIsNewer(record, than: machine.credentials, generation: generation) else { return nil }
            return (machine.identifier, machine.ledgerFence)
        }
        if let adopting {
            ledger.adopted(
                adopting.identifier, record.session, fence: adopting.fence, turn: turn.token,
                schedule: ledgerSchedule(for: generation))
        }
        let adopted = modifyStateAndRunActions { $0.recordAdopted(record, generation: generation) }
        return adopted ? .adopted : .none
    }

    /// After the write turn is left: a session whose record was removed elsewhere is closed by its controller; one
    /// whose credentials the record says were refused is invalidated, and the identifier's other views are told.
    func finishAdoption(_ adoption: Adoption, generation: UInt64) async {
        switch adoption {
        case .none, .adopted:
            return
        case .removed:
            await currentOwner?.recordRemovedElsewhere(generation: generation)
        case .refused(let identifier, let invalidates, let views):
            for view in views { view.ledgerAdvanced(identifier) }
            if invalidates { await currentOwner?.credentialsRevoked(generation: generation) }
        }
    }

    /// Reads the record of the active session of `generation` and adopts it when it is newer than what the
    /// session holds, or closes the session when it is gone. Ordered with the session's own writes (it takes the
    /// identifier's write turn). Returns whether something was adopted or the session was found cleared.
    @discardableResult
    func reloadFromStore(generation: UInt64) async -> Bool {
        guard let coordinatedStore,
            let identifier = inspect({ $0.active && $0.generation == generation ? $0.identifier : nil })
        else { return false }
        let adoption = await withWriteTurn(identifier) { turn -> Adoption? in
            // Read again in the turn: the session may have ended or changed while the turn was awaited.
            guard
                let held = inspect({ machine -> Credentials?? in
                    machine.active && machine.generation == generation ? .some(machine.credentials) : nil
                })
            else { return nil }
            let record: RevisedSession?
            do {
                record = try await coordinatedStore.loadRevised(identifier: identifier)
            } catch {
                emitWhileActive(
                    .persistenceFailed, generation: generation,
                    detail: "could not read the token store after a change notification: "
                        + RefreshStateMachine.describePersistFailure(error))
                return nil
            }
            // A record marked refused is acted on even when it holds the very credentials the session holds.
            // A record holding the newest credentials this process knows, while the session's refresh is in flight,
            // is not news: it is that refresh's own write, whose notification can come before the commit
            // publishes it (the commit hands the turn on first), or a result the entry answers the flight with. The
            // flight publishes it; adopted here, the flight would go stale and its refresh go unreported.
            let newest = ledger.newest(identifier)
            let newer = record.map { record in
                inspect { machine in
                    if machine.storeRefuses(record, held, generation: generation) { return true }
                    guard machine.storeIsNewer(record, than: held, generation: generation) else { return false }
                    guard machine.flights.isRefreshing, let newest else { return true }
                    return !record.session.holdsSameTokens(as: newest)
                }
            }
            guard newer ?? true else { return nil }
            return adoptHoldingTurn(record, generation: generation, turn: turn)
        }
        guard let adoption else { return false }
        await finishAdoption(adoption, generation: generation)
        return true
    }

    // MARK: - Change notifications

    /// Subscribes to the coordinated store's changes for the session of `generation` (until ``stopWatchingStore()``).
    func startWatchingStore(identifier: String, generation: UInt64) {
        guard let coordinatedStore else { return }
        let stream = coordinatedStore.changes()
        let task = Task { [weak self] in
            for await change in stream {
                guard let self else { return }
                await self.storeChanged(change, identifier: identifier, generation: generation)
            }
        }
        replaceStoreWatch(with: task)
    }

    func stopWatchingStore() {
        replaceStoreWatch(with: nil)
    }

    /// Follows the store's changes with `task` (or nothing) from now on; the task that did before is cancelled, after
    /// the lock.
    private func replaceStoreWatch(with task: Task<Void, Never>?) {
        let previous = links.withLock { links in
            defer { links.storeWatch = task }
            return links.storeWatch
        }
        previous?.cancel()
    }

    private func storeChanged(_ change: TokenStoreChange, identifier: String, generation: UInt64) async {
        switch change {
        case .saved(let changed, let revision):
            guard ExactIdentifier.areEqual(changed, identifier) else { return }
            let held = inspect { $0.generation == generation ? $0.heldRevision : nil }
            if let held, revision <= held { return }
        case .removed(let changed):
            guard ExactIdentifier.areEqual(changed, identifier) else { return }
        case .resynchronize:
            break
        }
        await reloadFromStore(generation: generation)
    }
}

extension CredentialsGate {
    // MARK: - Links and background work

    /// What the gate is tied to besides its machine. Each is small and taken briefly, never with another lock of the
    /// gate held except ``eventOrder`` (which is taken first), so one lock serves them all:
    /// - the controller above the gate, weakly (see ``CredentialsGateOwner``);
    /// - whether the gate holds its session's identifier (the machine's ``RefreshStateMachine/identifier``, kept
    ///   until the next activation) in the ledger, from
    ///   ``activate(identifier:userInfo:credentials:generation:revision:heldFence:signingIn:)`` until
    ///   ``deactivate()`` has written what it could;
    /// - the task consuming the coordinated store's changes for the active session;
    /// - the unstructured tasks running refreshes and their commits (and the revocations of results a sign-out
    ///   dropped), so a close can cancel them when the store overruns its deadline, and a shutdown waits for them.
    struct Links {
        /// The ``CredentialsGateOwner`` set by ``setOwner(_:)``, held as a bare object: a weak existential would keep
        /// its witness table beside it in every idle session, for reads that happen only when a session ends or hears
        /// from the ledger.
        weak var owner: AnyObject?
        var storeWatch: Task<Void, Never>?
        /// The last id given to a background task or a final flush of ``deactivate()``: never reused, so an id stays
        /// unique when ``work`` is dropped and made again, and a later flush has a greater one.
        var nextID: UInt64 = 0
        /// The background tasks running and the write turns held, while there are any (see ``BackgroundWork``).
        private var work: BackgroundWork?
        /// Whether a shutdown waits for the flights and the ledger (``settleBeforeExit(_:)``; a probe for tests).
        /// The two flags come last, so the gate's own flag and lock fill the rest of their word (see
        /// ``CredentialsGate/readsSystemClock``).
        var settlingBeforeExit = false
        /// Whether the session's identifier is held in the ledger (see above).
        var holdsIdentifier = false

        /// The running background tasks, by id.
        var running: [UInt64: Task<Void, Never>] { work?.running ?? [:] }
        /// Whether a write of this gate holds a write turn now.
        var holdsTurns: Bool { work?.heldTurns.isEmpty == false }
        /// The write turns held now (token to identifier).
        var heldTurns: [UInt64: String] { work?.heldTurns ?? [:] }
        /// What observes the background work, if anything.
        var probe: (any BackgroundWorkProbe)? { work?.probe }
        /// The newest final flush ``deactivate()`` stopped waiting for (0: none): a flush numbered up to it reports
        /// nothing.
        var flushAbandoned: UInt64 { work?.flushAbandoned ?? 0 }

        /// The next id for a background task or a final flush.
        mutating func takeID() -> UInt64 {
            nextID += 1
            return nextID
        }

        /// Changes the background work, made now if there is none; dropped again once it holds nothing.
        mutating func modifyWork<Value>(_ body: (BackgroundWork) -> Value) -> Value {
            let work = self.work ?? BackgroundWork()
            let value = body(work)
            self.work = work.isEmpty ? nil : work
            return value
        }
    }

    /// What a gate runs in the background, the write turns its writes hold and the final flush a close abandoned, in an
    /// object of its own: a session that runs nothing keeps a word for it, not five. Read and changed only under
    /// ``links``' lock, like the ``Links`` that hold it.
    final class BackgroundWork {
        var running: [UInt64: Task<Void, Never>] = [:]
        /// Tasks that finished before they were recorded (a task may finish before `Task {}` returns).
        var finishedEarly: Set<UInt64> = []
        /// The ledger's write turns this gate's writes hold now (token to identifier): one that overran both of
        /// `deactivate()`'s deadlines loses its turn.
        var heldTurns: [UInt64: String] = [:]
        /// What observes the background work, if anything (see ``BackgroundWorkProbe``; production code installs
        /// none).
        var probe: (any BackgroundWorkProbe)?
        /// See ``Links/flushAbandoned``: kept from the first abandoned flush on (a store that overran both of a close's
        /// deadlines), so the object stays for the gate's life from then.
        var flushAbandoned: UInt64 = 0

        var isEmpty: Bool {
            running.isEmpty && finishedEarly.isEmpty && heldTurns.isEmpty && probe == nil && flushAbandoned == 0
        }
    }

    /// Runs `body` in an unstructured task that no caller's cancellation reaches, recorded until it finishes.
    @discardableResult
    func runInBackground(_ body: @escaping @Sendable () async -> Void) -> Task<Void, Never> {
        let id = links.withLock { $0.takeID() }
        let task = Task {
            await body()
            self.links.withLock { links in
                links.modifyWork { work in
                    if work.running.removeValue(forKey: id) == nil { work.finishedEarly.insert(id) }
                }
            }
        }
        let probe = links.withLock { links in
            links.modifyWork { work in
                if work.finishedEarly.remove(id) == nil { work.running[id] = task }
                return work.probe
            }
        }
        probe?.backgroundTaskStarted(task)
        return task
    }

    /// Whether a shutdown waits for the flights and the ledger now (a probe for tests).
    var isSettlingBeforeExit: Bool { links.withLock { $0.settlingBeforeExit } }

    func cancelBackgroundWork() {
        let tasks = links.withLock { Array($0.running.values) }
        for task in tasks { task.cancel() }
    }
}

extension CredentialsGate {
    /// Records that a token was asked for at `now` (seconds since the reference date), for the registry's idle
    /// eviction.
    ///
    /// On the hot path, so it writes at most once a second per session: the shared cache line is only read by
    /// every other call in that second.
    @inline(__always)
    func noteDemand(_ now: Double) {
        if now - Double(bitPattern: lastDemandBits.load(ordering: .relaxed)) >= 1 {
            lastDemandBits.store(now.bitPattern, ordering: .relaxed)
        }
    }

    /// When a token was last asked for, in seconds since the reference date (to the second), or 0 if never.
    var lastTokenDemand: Double { Double(bitPattern: lastDemandBits.load(ordering: .relaxed)) }

    /// Whether a refresh is in flight or a write to the store is in progress: the registry never evicts a session
    /// while its credentials are being committed.
    /// The ledger's work counts too: nothing with a refresh in flight or an unwritten rotation is evicted.
    var hasWorkInProgress: Bool {
        let (busy, identifier) = inspect { ($0.flights.isRefreshing, $0.identifier) }
        return busy || links.withLock({ $0.holdsTurns })
            || (!identifier.isEmpty && ledger.hasPendingWork(identifier))
    }
}

/// A small internal probe of a gate's background work: the refreshes (and their commits) it runs in unstructured tasks
/// of their own. Tests install one to wait for that work; the gate keeps nothing for them.
protocol BackgroundWorkProbe: AnyObject, Sendable {
    /// `task` was started. Called with no lock of the gate held.
    func backgroundTaskStarted(_ task: Task<Void, Never>)
    /// A commit's write returned (or the store held its record already), the write turn is handed on, and the commit
    /// is about to publish: a test can hold it here, in the window where another writer of the identifier, or a
    /// change notification, runs before the publication. Called with no lock of the gate held.
    func commitLanded() async
}

extension BackgroundWorkProbe {
    func commitLanded() async {}
}
