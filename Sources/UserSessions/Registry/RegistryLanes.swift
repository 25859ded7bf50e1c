/// The per-identifier turnstiles of ``UserSessionRegistry``, as a synchronous state machine.
///
/// Every registry operation for one identifier takes a ticket in that identifier's lane synchronously when it is
/// called (before its first suspension) and runs only when its ticket is at the head of the lane, so operations
/// for one user take effect in call order even though they suspend. Lanes of different users are independent.
/// `switchUser(to:)` and `restoreCurrentUser()` also queue in one lane of their own, ``Key/switching``, so switches
/// take effect in call order too.
///
/// A lane exists only while it has tickets: "this identifier has a lane" means "an operation for it is in
/// progress or waiting", which is what eviction checks before it touches a controller.
struct RegistryLanes<Waiter> {
    /// Which lane.
    enum Key: Hashable {
        /// The operations for one identifier.
        case user(ExactIdentifier)
        /// `switchUser(to:)` and `restoreCurrentUser()`.
        case switching
    }

    /// A place in a lane.
    struct Ticket: Hashable {
        let key: Key
        let number: UInt64
    }

    private struct Lane {
        /// Tickets in call order; the first one runs.
        var queue: [UInt64] = []
        var parked: [UInt64: Waiter] = [:]
        /// The get-or-restore flight that is the last operation in this lane, which later get-or-restore calls join
        /// instead of queueing behind it (their outcome would be the same).
        var joinableFlight: UInt64?
    }

    private var lanes: [Key: Lane] = [:]
    private var nextNumber: UInt64 = 0

    init() {}

    /// Takes a ticket at the tail of `key`'s lane. Returns it and whether it runs at once.
    ///
    /// - Parameter flight: The get-or-restore flight this ticket runs, which later calls may join; `nil` for any
    ///   other operation (which ends the joinability of the flight before it).
    mutating func enter(_ key: Key, flight: UInt64? = nil) -> (ticket: Ticket, runsNow: Bool) {
        nextNumber += 1
        let number = nextNumber
        var lane = lanes[key] ?? Lane()
        lane.queue.append(number)
        lane.joinableFlight = flight
        lanes[key] = lane
        return (Ticket(key: key, number: number), lane.queue.count == 1)
    }

    /// The flight that a get-or-restore call for `key` may join now, if any.
    func joinableFlight(_ key: Key) -> UInt64? {
        lanes[key]?.joinableFlight
    }

    /// Ends the joinability of `flight` (it has finished its work).
    mutating func closeFlight(_ flight: UInt64, in key: Key) {
        if lanes[key]?.joinableFlight == flight { lanes[key]?.joinableFlight = nil }
    }

    /// Parks `waiter` until `ticket` reaches the head of its lane; returns it back when it is there already
    /// (resume it at once).
    mutating func park(_ waiter: Waiter, ticket: Ticket) -> Waiter? {
        guard let lane = lanes[ticket.key], lane.queue.contains(ticket.number) else {
            preconditionFailure("registry lanes: park of an unknown ticket")
        }
        if lane.queue.first == ticket.number { return waiter }
        lanes[ticket.key]?.parked[ticket.number] = waiter
        return nil
    }

    /// The operation holding `ticket` (the head of its lane) is done; returns the next waiter to resume, if it is
    /// parked already (if not, its `park` finds it at the head and returns at once).
    mutating func leave(_ ticket: Ticket) -> Waiter? {
        guard var lane = lanes[ticket.key], lane.queue.first == ticket.number else {
            preconditionFailure("registry lanes: leave of a ticket that is not running")
        }
        lane.queue.removeFirst()
        guard let next = lane.queue.first else {
            lanes[ticket.key] = nil
            return nil
        }
        let waiter = lane.parked.removeValue(forKey: next)
        lanes[ticket.key] = lane
        return waiter
    }

    /// Whether an operation for `key` is running or waiting.
    func isBusy(_ key: Key) -> Bool { lanes[key] != nil }

    /// How many operations for `key` are running or waiting.
    func count(_ key: Key) -> Int { lanes[key]?.queue.count ?? 0 }
}
