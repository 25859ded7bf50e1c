/// Everything ``UserSessionRegistry`` keeps behind its lock: the controllers it holds, the per-identifier lanes, the
/// get-or-restore flights and the current user.
///
/// Only synchronous bookkeeping happens here. Nothing in it suspends or calls user code; continuations it hands
/// back are resumed by the registry after the lock is released.
struct RegistryState {
    /// One held controller.
    struct Entry {
        /// Tells this controller apart from a later one for the same identifier.
        let id: UInt64
        let controller: UserSessionController
        /// When the registry last handed the controller out (seconds since the reference date).
        var lastLookup: Double
        /// Orders lookups made at the same clock reading, for the least-recently-used choice.
        var lookupStamp: UInt64
    }

    /// A get-or-restore in progress and the callers waiting for its outcome.
    struct Flight {
        var waiters: [UInt64: UnsafeContinuation<UserSessionController, any Error>] = [:]
    }

    /// A controller claimed for eviction: its lane is held by `ticket` until the eviction is done.
    struct Victim {
        let key: ExactIdentifier
        let entryID: UInt64
        let controller: UserSessionController
        let ticket: RegistryLanes<CheckedContinuation<Void, Never>>.Ticket
    }

    var entries: [ExactIdentifier: Entry] = [:]
    var lanes = RegistryLanes<CheckedContinuation<Void, Never>>()
    var flights: [UInt64: Flight] = [:]
    var currentIdentifier: String?
    var isShutDown = false
    private var nextEntryID: UInt64 = 0
    private var nextStamp: UInt64 = 0
    private var nextFlightID: UInt64 = 0

    /// The controller held for `key`, marked as used at `now`.
    mutating func lookUp(_ key: ExactIdentifier, now: Double) -> UserSessionController? {
        guard entries[key] != nil else { return nil }
        nextStamp += 1
        entries[key]?.lastLookup = now
        entries[key]?.lookupStamp = nextStamp
        return entries[key]?.controller
    }

    /// The controller held for `key` if its session is open and no operation for it is in progress or waiting:
    /// the fast path of get-or-restore.
    mutating func openIdleController(_ key: ExactIdentifier, now: Double) -> UserSessionController? {
        guard !lanes.isBusy(.user(key)), let controller = entries[key]?.controller, controller.session.isOpened
        else { return nil }
        return lookUp(key, now: now)
    }

    /// Holds `controller` for `key` (which must hold none) and returns its entry id.
    mutating func insert(_ controller: UserSessionController, for key: ExactIdentifier, now: Double) -> UInt64 {
        nextEntryID += 1
        nextStamp += 1
        entries[key] = Entry(id: nextEntryID, controller: controller, lastLookup: now, lookupStamp: nextStamp)
        return nextEntryID
    }

    /// Drops the entry for `key` if it is still the one with `entryID`; returns whether it did.
    mutating func remove(_ key: ExactIdentifier, entryID: UInt64) -> Bool {
        guard entries[key]?.id == entryID else { return false }
        entries[key] = nil
        return true
    }

    /// Starts a flight, waited for by `waiter`, and returns its id.
    mutating func startFlight(waiterID: UInt64, _ waiter: UnsafeContinuation<UserSessionController, any Error>)
        -> UInt64
    {
        nextFlightID += 1
        flights[nextFlightID] = Flight(waiters: [waiterID: waiter])
        return nextFlightID
    }

    /// Removes the waiter `waiterID` from whichever flight it waits for, and returns it.
    mutating func removeFlightWaiter(_ waiterID: UInt64) -> UnsafeContinuation<UserSessionController, any Error>? {
        for (flightID, flight) in flights where flight.waiters[waiterID] != nil {
            return flights[flightID]?.waiters.removeValue(forKey: waiterID)
        }
        return nil
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
            let (ticket, runsNow) = lanes.enter(.user(key))
            precondition(runsNow, "registry: an idle lane was busy")
            return Victim(key: key, entryID: entry.id, controller: entry.controller, ticket: ticket)
        }
    }
}
