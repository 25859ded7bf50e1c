/// Per-key FIFO turns, as a synchronous state machine: the one queue behind every place that orders operations per
/// key (the registry's per-user lanes, a controller's lifecycle turnstile).
///
/// An operation takes a ticket at the tail of its key's lane with ``enter(_:)``, synchronously, before its first
/// suspension, so a lane's order is the call order. One ticket of a lane runs at a time, in that order; the others
/// wait. An operation that must wait parks a waiter with ``park(_:for:)`` and runs when the owner resumes it; the
/// running one ends its turn with ``leave(_:)``, which hands back the next waiter. When the next ticket has not
/// parked yet, the turn waits for it: its ``park(_:for:)`` hands its waiter straight back. Lanes of different keys are
/// independent. A lane exists only while it has tickets, so "`key` is busy" means "an operation for it is running or
/// waiting".
///
/// The owner keeps the value inside its own lock (or actor); the type has no lock of its own and resumes nothing.
/// A waiter is an opaque value (in the package, a ``Parked`` caller) handed back to the owner, which resumes it
/// after releasing its lock. Impossible calls
/// (a leave by a ticket that is not running, a park of an unknown ticket) stop the process.
///
/// Cost: an idle value is a few words and owns no heap memory. The lane of one busy key is kept inline; a dictionary
/// is allocated only while a second key is busy at the same time, and a lane's array only when a ticket waits.
struct FIFOLanes<Key: Hashable, Waiter> {
    /// A place in a lane.
    struct Ticket: Hashable {
        let key: Key
        /// From 1 on, unique in the value.
        let number: UInt64
    }

    fileprivate struct Lane {
        let key: Key
        /// The running ticket, which knows the turn is its; 0 (no ticket's number) while the turn waits for
        /// `behind[0]`, which has not parked yet.
        var head: UInt64
        /// The tickets after it in call order, each with its waiter once it has parked.
        var behind: [(number: UInt64, waiter: Waiter?)] = []

        /// Ends the running ticket's turn: the next ticket runs if it has parked, else the turn waits for it.
        mutating func passTurn() -> Passing {
            guard !behind.isEmpty else { return .emptied }
            guard let waiter = behind[0].waiter else {
                head = 0
                return .passed(resume: nil)
            }
            head = behind.removeFirst().number
            return .passed(resume: waiter)
        }

        var count: Int { (head == 0 ? 0 : 1) + behind.count }
    }

    /// Where the turn went when the running ticket's ended.
    fileprivate enum Passing {
        /// No ticket is left: the lane is removed.
        case emptied
        /// To the next ticket; `resume` is its waiter if it has parked.
        case passed(resume: Waiter?)
    }

    /// The lane of the key that became busy while no other was: the only one, for a user with a single key.
    private var solo: Lane?
    /// The lanes of other keys busy at the same time.
    private var others: [Key: Lane] = [:]
    private var lastNumber: UInt64 = 0

    init() {}

    /// Takes a ticket at the tail of `key`'s lane. Returns it and whether it runs at once (the lane was empty); if
    /// not, park a waiter for it.
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

    /// Parks `waiter` until `ticket` runs. Returns it back when `ticket` runs now (resume it at once: the turn had
    /// come to it already), `nil` when it was parked.
    mutating func park(_ waiter: Waiter, for ticket: Ticket) -> Waiter? {
        modifyLane(ticket.key) { lane -> Waiter? in
            guard let head = lane?.head else { preconditionFailure("FIFO lanes: park of an unknown ticket") }
            if head == ticket.number { return waiter }
            if head == 0, lane?.behind.first?.number == ticket.number {
                lane?.head = ticket.number
                lane?.behind.removeFirst()
                return waiter
            }
            guard let index = lane?.behind.lastIndex(where: { $0.number == ticket.number }) else {
                preconditionFailure("FIFO lanes: park of an unknown ticket")
            }
            lane?.behind[index].waiter = waiter
            return nil
        }
    }

    /// The running `ticket` is done: the next ticket of its lane runs. Returns its waiter to resume, if it is parked
    /// already (if not, its ``park(_:for:)`` returns at once).
    mutating func leave(_ ticket: Ticket) -> Waiter? {
        let passing = modifyLane(ticket.key) { lane -> Passing? in
            guard lane?.head == ticket.number else { return nil }
            return Self.passTurn(of: &lane)
        }
        guard let passing else { preconditionFailure("FIFO lanes: leave of a ticket that is not running") }
        guard case .passed(let waiter) = passing else { return nil }
        return waiter
    }

    /// Whether `ticket` runs: its turn came, and it knows (it entered an empty lane, or parked once the turn was its).
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
        if let solo, solo.key == key { return solo.count }
        guard !others.isEmpty, let lane = others[key] else { return 0 }
        return lane.count
    }

    /// Passes the turn of the running ticket of `lane` (which must exist) on, and removes the lane when it empties.
    private static func passTurn(of lane: inout Lane?) -> Passing {
        let passing = lane?.passTurn() ?? .emptied
        if case .emptied = passing { lane = nil }
        return passing
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

/// The key of a user with a single lane (a controller's lifecycle turnstile).
enum SingleLane: Hashable, Sendable {
    case only
}

extension FIFOLanes where Key == SingleLane {
    /// ``enter(_:)`` for the single lane.
    mutating func enter() -> (ticket: Ticket, runsNow: Bool) { enter(.only) }

    /// Whether an operation is running or waiting.
    var isBusy: Bool { isBusy(.only) }

    /// How many operations are running or waiting.
    var count: Int { count(.only) }
}
