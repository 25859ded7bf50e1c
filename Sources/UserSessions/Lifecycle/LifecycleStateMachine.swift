/// The ordering rules of ``UserSessionController``'s lifecycle calls, as a synchronous state machine.
///
/// The controller is an actor, and actors are reentrant: every `await` inside `open` lets another call run. This
/// machine turns the calls into a FIFO turnstile, one ``FIFOLanes`` lane: a call takes a ticket synchronously on
/// entry (before its first suspension) and runs its effect only when its ticket has the turn, so calls take effect in
/// call order and none is lost. On top of the lane it keeps the lifecycle's own rules: what a running open must do,
/// rejecting opens after shutdown, and which invalidations need a turn at all.
///
/// One call may jump the queue, and only partly: a close-like call (`close`, `closeAndClear`, `shutdown`) that
/// arrives while an open (or restore) is running marks that open for roll-back and asks the controller to cancel
/// its service start. The close still takes a normal ticket and runs its own effect after the open has rolled back
/// (usually a no-op, since nothing is open any more). Calls queued between the two are not affected.
///
/// Invalidations (terminal refresh failures reported by the credentials gate) never wait behind a call that is
/// itself waiting for that gate: an invalidation of the session being opened is folded into the running open, and
/// one for a session that is already ending, or stale, is dropped.
struct LifecycleStateMachine<Waiter> {
    /// A lifecycle call.
    enum Call: Equatable {
        /// `open(_:)`, `restore()`, `restore(identifier:)`.
        case open
        /// `close()`, `closeAndClear()`.
        case close
        /// `shutdown()`.
        case shutdown
        /// The gate reported a terminal failure for `generation`.
        case invalidate(generation: UInt64, reason: Invalidation)
    }

    /// Why the gate invalidates a session: the reasons an invalidation arriving as a call can have. (A service that
    /// fails to start is the opening's own failure, never a call.) One byte, so the opening that folds it in keeps
    /// no copy of a reason's text.
    enum Invalidation: Equatable {
        case credentialsRevoked
        case credentialsExpired

        /// The reason the session's `.invalidated` event gives.
        var reason: UserSessionEvent.InvalidationReason {
            switch self {
            case .credentialsRevoked: .credentialsRevoked
            case .credentialsExpired: .credentialsExpired
            }
        }
    }

    /// A place in the queue.
    typealias Ticket = FIFOLanes<SingleLane, Waiter>.Ticket

    /// What the caller does after ``enter(_:)``.
    enum EntryAction: Equatable {
        /// It is this call's turn; run, then ``leave(_:)``.
        case proceed(Ticket)
        /// Another call is running: ``park(_:ticket:)`` and run when resumed, then ``leave(_:)``.
        case wait(Ticket)
        /// The controller was shut down before this call: fail with ``UserSessionError/Code/shutdown``.
        case rejectShutDown
        /// An invalidation that needs no turn (stale, folded into a running open, or the session is ending).
        case dropped
    }

    /// The result of ``enter(_:)``.
    struct Entry: Equatable {
        var action: EntryAction
        /// A close-like call arrived while an open was running: cancel the open's service start.
        var cancelStarting: Bool = false
    }

    /// How a running open must end, as decided by calls that arrived while it ran.
    enum OpeningVerdict: Equatable {
        /// Nothing arrived: commit (or fail on its own).
        case proceed
        /// A close arrived: roll back, end `closed(.rolledBack)`, throw ``UserSessionError/Code/openRolledBack``.
        case rollBack
        /// The gate reported a terminal failure for the session being opened: end `invalid` for this reason.
        case invalidate(UserSessionEvent.InvalidationReason)
    }

    /// What runs besides the turns. Every session it speaks of is the newest, ``lastGeneration``'s: a session opens
    /// only while nothing opens or ends (an open runs once no session is opened, and its commit makes the activity
    /// idle), and no opening begins while it is opened or ending. So no case carries a generation.
    private enum Activity: Equatable {
        /// No opening or ending runs; `opened` when a session is opened now.
        case idle(opened: Bool)
        /// A session opens: `activated` once the gate serves it (invalidations for it are folded into the open from
        /// then on), with the invalidation that arrived and whether a close rolls it back.
        case opening(invalidation: Invalidation?, activated: Bool, rollBack: Bool)
        /// The opened session ends.
        case ending
    }

    private var turns = FIFOLanes<SingleLane, Waiter>()
    /// The generation of the newest opening: grows by one with every session opened or restored (the gate uses it
    /// to discard late refreshes).
    private(set) var lastGeneration: UInt64 = 0
    /// A few bytes (no generation, a one-byte reason), beside the flag below in the turnstile's last word.
    private var activity = Activity.idle(opened: false)
    private(set) var isShutDown = false
    /// The generation of the session that is opened now, if any: the newest (see ``Activity``).
    var openedGeneration: UInt64? {
        if case .idle(opened: true) = activity { return lastGeneration }
        return nil
    }

    init() {}

    /// How many calls are parked behind the running one. (A waiting call parks in the same actor step as it enters,
    /// so every call in line but the running one is parked.)
    var waiterCount: Int { max(turns.count - 1, 0) }

    /// Whether no call is running or waiting.
    var isIdle: Bool { !turns.isBusy }

    /// A call arrives. Runs synchronously on entry, before the call's first suspension.
    mutating func enter(_ call: Call) -> Entry {
        switch call {
        case .open:
            if isShutDown { return Entry(action: .rejectShutDown) }
            return Entry(action: takeTicket())
        case .close, .shutdown:
            // `close()` after shutdown is a no-op that still waits for the shutdown to finish; `closeAndClear()`
            // checks ``isShutDown`` itself before entering.
            var cancelStarting = false
            if case .opening(let invalidation, let activated, false) = activity {
                activity = .opening(invalidation: invalidation, activated: activated, rollBack: true)
                cancelStarting = true
            }
            if call == .shutdown { isShutDown = true }
            return Entry(action: takeTicket(), cancelStarting: cancelStarting)
        case .invalidate(let generation, let reason):
            if isShutDown { return Entry(action: .dropped) }
            switch activity {
            case .opening(nil, activated: true, let rollBack) where generation == lastGeneration:
                activity = .opening(invalidation: reason, activated: true, rollBack: rollBack)
                return Entry(action: .dropped, cancelStarting: !rollBack)
            case .opening(_?, activated: true, _) where generation == lastGeneration:
                return Entry(action: .dropped)
            case .ending where generation == lastGeneration:
                return Entry(action: .dropped)
            default:
                break
            }
            guard openedGeneration == generation else { return Entry(action: .dropped) }
            return Entry(action: takeTicket())
        }
    }

    /// Parks `waiter` for `ticket`; returns it back when its turn has already come (resume it at once).
    mutating func park(_ waiter: Waiter, ticket: Ticket) -> Waiter? {
        turns.park(waiter, for: ticket)
    }

    /// The running call finished; returns the next waiter to resume, if it is parked already.
    mutating func leave(_ ticket: Ticket) -> Waiter? {
        endActivity()
        return turns.leave(ticket)
    }

    /// The running call starts opening a session; close-like calls arriving from now on roll it back. Returns the
    /// new session's generation.
    @discardableResult
    mutating func beginOpening() -> UInt64 {
        activity = .opening(invalidation: nil, activated: false, rollBack: false)
        lastGeneration += 1
        return lastGeneration
    }

    /// The running open activated its session (the newest generation) in the gate; invalidations for it are folded
    /// into the open.
    mutating func openingActivated() {
        guard case .opening(let invalidation, _, let rollBack) = activity else {
            preconditionFailure("lifecycle turnstile: activation outside an opening")
        }
        activity = .opening(invalidation: invalidation, activated: true, rollBack: rollBack)
    }

    /// What the running open must do now.
    var openingVerdict: OpeningVerdict {
        guard case .opening(let invalidation, _, let rollBack) = activity else { return .proceed }
        if rollBack { return .rollBack }
        if let invalidation { return .invalidate(invalidation.reason) }
        return .proceed
    }

    /// The running open committed: its session (the newest generation) is opened.
    mutating func opened() {
        activity = .idle(opened: true)
    }

    /// The running call starts ending the opened session; invalidations for it are dropped from now on.
    mutating func beginEnding() {
        if case .idle(opened: true) = activity { activity = .ending }
    }

    /// The running call is done with its opening or ending phase.
    mutating func endActivity() {
        if case .idle = activity { return }
        activity = .idle(opened: false)
    }

    private mutating func takeTicket() -> EntryAction {
        let (ticket, runsNow) = turns.enter()
        return runsNow ? .proceed(ticket) : .wait(ticket)
    }
}
