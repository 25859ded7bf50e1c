/// Everything ``UserSessionRegistry`` keeps behind its lock: the controllers it holds, the per-identifier lanes, the
/// get-or-restore flights and the current user.
///
/// Only synchronous bookkeeping happens here. Nothing in it suspends or calls user code; continuations it hands
/// back are resumed by the registry after the lock is released.
struct RegistryState {
    /// One held controller.
    struct Entry {
        let controller: UserSessionController
        /// Tells this controller apart from a later one for the same identifier: the entry id the registry gave the
        /// controller when it made it (kept there, not a second time in every slot of ``entries``).
        var id: UInt64 { controller.registryEntryID }
        /// When the registry last handed the controller out (seconds since the reference date).
        var lastLookup: Double
        /// Orders lookups made at the same clock reading, for the least-recently-used choice.
        var lookupStamp: UInt64
    }

    /// Which lane of ``lanes``.
    ///
    /// Every registry operation for one identifier takes a ticket in that identifier's lane synchronously when it is
    /// called (before its first suspension) and runs only when its turn comes, so operations for one user take effect
    /// in call order even though they suspend. Lanes of different users are independent. `switchUser(to:)` and
    /// `restoreCurrentUser()` also queue in one lane of their own, so switches take effect in call order too.
    enum LaneKey: Hashable {
        /// The operations for one identifier.
        case user(ExactIdentifier)
        /// `switchUser(to:)` and `restoreCurrentUser()`.
        case switching
    }

    typealias Lanes = FIFOLanes<LaneKey, Parked<Void, Never>>

    /// A controller claimed for eviction: its lane is held by `ticket` until the eviction is done.
    struct Victim {
        let key: ExactIdentifier
        let entryID: UInt64
        let controller: UserSessionController
        let ticket: Lanes.Ticket
    }

    var entries: [ExactIdentifier: Entry] = [:]
    /// The per-identifier turns. A lane exists only while it has tickets: "this identifier has a lane" means "an
    /// operation for it is in progress or waiting", which is what eviction checks before it touches a controller.
    /// Entered through ``enterLane(_:flight:)`` only, which keeps ``joinableFlight(_:)`` true.
    private(set) var lanes = Lanes()
    /// Per lane, the get-or-restore flight that is the last operation in it, which later get-or-restore calls join
    /// instead of queueing behind it (their outcome would be the same).
    private var joinableFlights: [LaneKey: UInt64] = [:]
    /// The get-or-restore flights in progress (keyed by flight id) and the callers waiting for their outcome.
    var flights = SingleFlight<UInt64, Parked<UserSessionController, any Error>>()
    var currentIdentifier: String?
    var isShutDown = false
    private var nextStamp: UInt64 = 0
    private var nextFlightID: UInt64 = 0

    /// Takes a ticket at the tail of `key`'s lane. Returns it and whether it runs at once.
    ///
    /// - Parameter flight: The get-or-restore flight this ticket runs, which later calls may join; `nil` for any
    ///   other operation (which ends the joinability of the flight before it).
    mutating func enterLane(_ key: LaneKey, flight: UInt64? = nil) -> (ticket: Lanes.Ticket, runsNow: Bool) {
        if flight != nil || !joinableFlights.isEmpty { joinableFlights[key] = flight }
        return lanes.enter(key)
    }

    /// Parks `waiter` until `ticket` has the turn in its lane; returns it back when it has it already.
    mutating func parkInLane(_ waiter: Parked<Void, Never>, for ticket: Lanes.Ticket) -> Parked<Void, Never>? {
        lanes.park(waiter, for: ticket)
    }

    /// Ends the turn of `ticket`; returns the next waiter of its lane to resume, if it is parked already.
    mutating func leaveLane(_ ticket: Lanes.Ticket) -> Parked<Void, Never>? {
        lanes.leave(ticket)
    }

    /// The flight that a get-or-restore call for `key` may join now, if any.
    func joinableFlight(_ key: LaneKey) -> UInt64? {
        joinableFlights.isEmpty ? nil : joinableFlights[key]
    }

    /// Ends the joinability of `flight` (it has finished its work).
    mutating func closeFlight(_ flight: UInt64, in key: LaneKey) {
        if joinableFlight(key) == flight { joinableFlights[key] = nil }
    }

    /// The controller held for `key`, marked as used at `now`.
    mutating func lookUp(_ key: ExactIdentifier, now: Double) -> UserSessionController? {
        // Read, changed and written back whole: an optional-chained assignment through the dictionary's `_modify`
        // allocates a coroutine frame per access.
        guard var entry = entries[key] else { return nil }
        nextStamp += 1
        entry.lastLookup = now
        entry.lookupStamp = nextStamp
        entries[key] = entry
        return entry.controller
    }

    /// The controller held for `key` if its session is open and no operation for it is in progress or waiting:
    /// the fast path of get-or-restore.
    mutating func openIdleController(_ key: ExactIdentifier, now: Double) -> UserSessionController? {
        guard !lanes.isBusy(.user(key)), let controller = entries[key]?.controller, controller.session.isOpened
        else { return nil }
        return lookUp(key, now: now)
    }

    /// Holds `controller` for `key` (which must hold none), as the entry the registry made it for.
    mutating func insert(_ controller: UserSessionController, for key: ExactIdentifier, now: Double) {
        nextStamp += 1
        entries[key] = Entry(controller: controller, lastLookup: now, lookupStamp: nextStamp)
    }

    /// Drops the entry for `key` if it is still the one with `entryID`; returns whether it did.
    mutating func remove(_ key: ExactIdentifier, entryID: UInt64) -> Bool {
        guard entries[key]?.id == entryID else { return false }
        entries[key] = nil
        return true
    }

    /// Starts a flight, waited for by `waiter`, and returns its id.
    mutating func startFlight(waiterID: UInt64, _ waiter: Parked<UserSessionController, any Error>) -> UInt64 {
        nextFlightID += 1
        _ = flights.lead(nextFlightID)
        _ = flights.join(nextFlightID, id: waiterID, waiter)
        return nextFlightID
    }

    /// Removes the waiter `waiterID` from whichever flight it waits for, and returns it.
    mutating func removeFlightWaiter(_ waiterID: UInt64) -> Parked<UserSessionController, any Error>? {
        flights.leave(id: waiterID)
    }

    /// Chooses the controllers to evict now and claims their lanes, so no operation for them starts before the
    /// eviction is done. Controllers with an operation in progress or waiting are never chosen.
    ///
    /// - Parameters:
    ///   - now: The time, in seconds since the reference date.
    ///   - unopened: Whether to choose controllers whose session is not open (never opened, closed or invalid).
    ///   - idleTimeout: Choose open sessions neither looked up nor asked for a token for this long, if set.
    ///   - maximumOpen: Then choose the least recently used open sessions until at most this many stay open.
    ///   - sparing: An identifier never to choose (the one that was just opened).
    mutating func claimVictims(
        now: Double, unopened: Bool, idleTimeout: Double?, maximumOpen: Int?, sparing: ExactIdentifier? = nil
    ) -> [Victim] {
        var chosen: [ExactIdentifier] = []
        var candidates: [(key: ExactIdentifier, recency: Double, stamp: UInt64)] = []
        var staying = 0
        for (key, entry) in entries {
            let opened = entry.controller.session.isOpened
            guard key != sparing, !lanes.isBusy(.user(key)) else {
                if opened { staying += 1 }
                continue
            }
            guard opened else {
                if unopened { chosen.append(key) }
                continue
            }
            let recency = max(entry.lastLookup, entry.controller.lastTokenDemand)
            if let idleTimeout, now - recency >= idleTimeout {
                chosen.append(key)
            } else {
                candidates.append((key, recency, entry.lookupStamp))
            }
        }
        if let maximumOpen, staying + candidates.count > maximumOpen {
            candidates.sort { ($0.recency, $0.stamp) < ($1.recency, $1.stamp) }
            let excess = min(candidates.count, staying + candidates.count - maximumOpen)
            chosen.append(contentsOf: candidates.prefix(excess).map(\.key))
        }
        return chosen.compactMap { key in
            guard let entry = entries[key] else { return nil }
            let (ticket, runsNow) = enterLane(.user(key))
            precondition(runsNow, "registry: an idle lane was busy")
            return Victim(key: key, entryID: entry.id, controller: entry.controller, ticket: ticket)
        }
    }
}
