/// Per-key FIFO turns, as a synchronous state machine: the one queue behind every place that orders operations per
/// key (the registry's per-user lanes, a controller's lifecycle turnstile, a gate's persistence slot).
///
/// An operation takes a ticket at the tail of its key's lane with ``enter(_:)``, synchronously, before its first
/// suspension, so a lane's order is the call order. The ticket at the head of the lane has the turn ("runs"); the
/// others wait. An operation that must wait parks a waiter with ``park(_:for:)`` and is resumed when its turn comes;
/// the running one ends its turn with ``leave(_:)``, which hands back the next waiter. Lanes of different keys are
/// independent. A lane exists only while it has tickets, so "`key` is busy" means "an operation for it is running or
/// waiting".
///
/// The owner keeps the value inside its own lock (or actor); the type has no lock and no continuations of its own.
/// A waiter is an opaque value handed back to the owner, which resumes it after releasing its lock. Impossible calls
/// (a leave by a ticket that does not hold the turn, a park of an unknown ticket) stop the process.
///
/// Cost: an idle value is a few words and owns no heap memory. The lane of one busy key is kept inline; a dictionary
/// is allocated only while a second key is busy at the same time, and a lane's array only when a ticket waits.
struct FIFOLanes<Key: Hashable, Waiter> {
    /// A place in a lane.
    struct Ticket: Hashable {
        let key: Key
        let number: UInt64
    }

    fileprivate struct Lane {
        let key: Key
        /// The ticket whose turn it is.
        var head: UInt64
        /// The tickets behind it in call order, each with its waiter once it has parked.
        var behind: [(number: UInt64, waiter: Waiter?)] = []

        /// Ends the head's turn. Returns whether a ticket took it over and, if so, that ticket's parked waiter.
        mutating func advance() -> (next: Bool, waiter: Waiter?) {
            guard !behind.isEmpty else { return (false, nil) }
            let next = behind.removeFirst()
            head = next.number
            return (true, next.waiter)
        }
    }

    /// The lane of the key that became busy while no other was: the only one, for a user with a single key.
    private var solo: Lane?
    /// The lanes of other keys busy at the same time.
    private var others: [Key: Lane] = [:]
    /// Tickets whose turn ``abandon(_:)`` took away, until they leave.
    private var abandoned: Set<Ticket> = []
    private var lastNumber: UInt64 = 0

    init() {}

    /// Takes a ticket at the tail of `key`'s lane. Returns it and whether it runs at once (the lane was empty).
    mutating func enter(_ key: Key) -> (ticket: Ticket, runsNow: Bool) {
        lastNumber += 1
        let number = lastNumber
        let runsNow = modifyLane(key) { lane in
            guard lane != nil else {
                lane = Lane(key: key, head: number)
                return true
            }
            lane?.behind.append((number, nil))
            return false
        }
        return (Ticket(key: key, number: number), runsNow)
    }

    /// Parks `waiter` until `ticket` has the turn. Returns it back when the turn is `ticket`'s already (resume it at
    /// once), `nil` when it was parked.
    mutating func park(_ waiter: Waiter, for ticket: Ticket) -> Waiter? {
        modifyLane(ticket.key) { lane -> Waiter? in
            guard let head = lane?.head else { preconditionFailure("FIFO lanes: park of an unknown ticket") }
            if head == ticket.number { return waiter }
            guard let index = lane?.behind.lastIndex(where: { $0.number == ticket.number }) else {
                preconditionFailure("FIFO lanes: park of an unknown ticket")
            }
            lane?.behind[index].waiter = waiter
            return nil
        }
    }

    /// The operation holding `ticket` is done: the next ticket of the lane gets the turn. Returns its waiter to
    /// resume, if it is parked already (if not, its ``park(_:for:)`` finds the turn is its and returns at once).
    ///
    /// A ticket whose turn was taken away by ``abandon(_:)`` leaves nothing (its lane has moved on) and is forgotten.
    mutating func leave(_ ticket: Ticket) -> Waiter? {
        let handover = modifyLane(ticket.key) { lane -> (held: Bool, waiter: Waiter?) in
            guard lane?.head == ticket.number else { return (false, nil) }
            guard let step = lane?.advance(), step.next else {
                lane = nil
                return (true, nil)
            }
            return (true, step.waiter)
        }
        guard handover.held else {
            guard !abandoned.isEmpty, abandoned.remove(ticket) != nil else {
                preconditionFailure("FIFO lanes: leave of a ticket that is not running")
            }
            return nil
        }
        return handover.waiter
    }

    /// Takes the turn away from the ticket running in `key`'s lane (an operation that overran its deadline and
    /// cannot be stopped), so the operations behind it are not blocked for ever. The next ticket gets the turn;
    /// returns its waiter to resume, if it is parked. The abandoned ticket stays known until it leaves, so its holder
    /// can learn what happened (``wasAbandoned(_:)``). Does nothing when `key`'s lane is empty.
    mutating func abandon(_ key: Key) -> Waiter? {
        let taken = modifyLane(key) { lane -> (ticket: UInt64?, waiter: Waiter?) in
            guard let head = lane?.head else { return (nil, nil) }
            guard let step = lane?.advance(), step.next else {
                lane = nil
                return (head, nil)
            }
            return (head, step.waiter)
        }
        if let number = taken.ticket { abandoned.insert(Ticket(key: key, number: number)) }
        return taken.waiter
    }

    /// Whether ``abandon(_:)`` took the turn away from `ticket` (and it has not left yet).
    func wasAbandoned(_ ticket: Ticket) -> Bool {
        !abandoned.isEmpty && abandoned.contains(ticket)
    }

    /// Whether `ticket` has the turn in its lane.
    func isRunning(_ ticket: Ticket) -> Bool {
        if let solo, solo.key == ticket.key { return solo.head == ticket.number }
        return !others.isEmpty && others[ticket.key]?.head == ticket.number
    }

    /// Whether an operation for `key` is running or waiting.
    func isBusy(_ key: Key) -> Bool {
        if solo?.key == key { return true }
        return !others.isEmpty && others[key] != nil
    }

    /// How many operations for `key` are running or waiting.
    func count(_ key: Key) -> Int {
        if let solo, solo.key == key { return 1 + solo.behind.count }
        guard !others.isEmpty, let lane = others[key] else { return 0 }
        return 1 + lane.behind.count
    }

    /// Runs `body` on `key`'s lane in place (`nil` when `key` has none); a lane that `body` sets to `nil` is removed.
    private mutating func modifyLane<Result>(_ key: Key, _ body: (inout Lane?) -> Result) -> Result {
        // A key lives in `solo` or in `others`, never in both: a new lane goes to `solo` only when `others` is empty.
        if solo?.key == key || (solo == nil && others.isEmpty) { return body(&solo) }
        return body(&others[key])
    }
}

extension FIFOLanes: Sendable where Key: Sendable, Waiter: Sendable {}

extension FIFOLanes.Lane: Sendable where Key: Sendable, Waiter: Sendable {}

extension FIFOLanes.Ticket: Sendable where Key: Sendable {}

/// The key of a user with a single lane (a controller's lifecycle turnstile, a gate's persistence slot).
enum SingleLane: Hashable, Sendable {
    case only
}

extension FIFOLanes where Key == SingleLane {
    /// ``enter(_:)`` for the single lane.
    mutating func enter() -> (ticket: Ticket, runsNow: Bool) { enter(.only) }

    /// ``abandon(_:)`` for the single lane.
    mutating func abandon() -> Waiter? { abandon(.only) }

    /// Whether an operation is running or waiting.
    var isBusy: Bool { isBusy(.only) }

    /// How many operations are running or waiting.
    var count: Int { count(.only) }
}
