/// The callers waiting for one flight (a refresh, a restore), kept in the order of their ids.
///
/// Ids come from an atomic counter taken before the caller reaches the lock, so a later id may occasionally arrive
/// first: the list stays sorted, and a waiter is found by binary search. A waiter that leaves (its task was
/// cancelled) leaves a tombstone instead of being removed, so leaving costs no shifting and the order holds.
///
/// A plain value kept inside its owner's lock, like ``FIFOLanes``: it never resumes anything itself; it hands the
/// waiters (in the package, ``Parked`` callers) back, to be resumed after the lock is released.
struct FlightWaiters<Continuation> {
    /// One waiter: `continuation` is `nil` once it left.
    struct Waiter {
        let id: UInt64
        var continuation: Continuation?
    }

    /// Every waiter, in id order, tombstones included.
    private(set) var all: [Waiter] = []

    init() {}

    var isEmpty: Bool { all.isEmpty }

    /// `waiter` waits now.
    mutating func add(_ waiter: Waiter) {
        if let last = all.last, last.id > waiter.id {
            all.insert(waiter, at: insertionIndex(of: waiter.id))
        } else {
            all.append(waiter)
        }
    }

    /// The waiter `id` leaves: returns its continuation if it still waits.
    mutating func remove(id: UInt64) -> Continuation? {
        let index = insertionIndex(of: id)
        guard index < all.count, all[index].id == id, let continuation = all[index].continuation else { return nil }
        all[index].continuation = nil
        return continuation
    }

    /// The continuations still waiting, in id order.
    var continuations: [Continuation] { all.compactMap(\.continuation) }

    /// The continuations still waiting, in id order, read in place (a landed flight's waiters are resumed by
    /// iterating them: no array is made for it).
    func forEachWaiting(_ body: (Continuation) -> Void) {
        for waiter in all {
            if let continuation = waiter.continuation { body(continuation) }
        }
    }

    private func insertionIndex(of id: UInt64) -> Int {
        var low = 0
        var high = all.count
        while low < high {
            let middle = (low + high) / 2
            if all[middle].id < id { low = middle + 1 } else { high = middle }
        }
        return low
    }
}

/// At most one flight per key: the first caller leads it, the callers that come while it runs join it, and all of
/// them get its one outcome. The one single-flight mechanism of the package: the registry's get-or-restore (keyed by
/// flight), the ledger's refreshes (keyed by the refresh token presented) and, through ``FlightWaiters``, the gate's
/// refresh of one session.
///
/// A plain value kept inside its owner's lock; it hands the waiters (``Parked`` callers) back, to be resumed after
/// the lock is released.
struct SingleFlight<Key: Hashable, Continuation> {
    private var flights: [Key: FlightWaiters<Continuation>] = [:]

    init() {}

    /// Whether a flight for `key` runs.
    func isRunning(_ key: Key) -> Bool { flights[key] != nil }

    var isEmpty: Bool { flights.isEmpty }

    /// How many callers wait for a flight besides the leaders.
    var waiterCount: Int { flights.values.reduce(0) { $0 + $1.continuations.count } }

    /// A caller asks for `key`: `true` when it leads a new flight (and must land it), `false` when one runs
    /// already (the caller joins it).
    mutating func lead(_ key: Key) -> Bool {
        guard flights[key] == nil else { return false }
        flights[key] = FlightWaiters()
        return true
    }

    /// The caller `id` waits for `key`'s flight; `false` when none runs (it landed meanwhile).
    mutating func join(_ key: Key, id: UInt64, _ continuation: Continuation) -> Bool {
        // Taken out and put back rather than changed through the dictionary's `_modify`, whose coroutine frame
        // allocates per access; taken out, the waiters' array stays uniquely referenced and grows in place.
        guard var waiters = flights.removeValue(forKey: key) else { return false }
        waiters.add(FlightWaiters.Waiter(id: id, continuation: continuation))
        flights[key] = waiters
        return true
    }

    /// `key`'s flight ended: returns its waiters, to resume with its outcome in the order they came
    /// (``FlightWaiters/forEachWaiting(_:)``).
    mutating func land(_ key: Key) -> FlightWaiters<Continuation> {
        flights.removeValue(forKey: key) ?? FlightWaiters()
    }

    /// The caller `id` no longer waits (its task was cancelled): returns its continuation if it still waited.
    mutating func leave(id: UInt64) -> Continuation? {
        for key in flights.keys {
            if let continuation = flights[key]?.remove(id: id) { return continuation }
        }
        return nil
    }
}

extension FlightWaiters: Sendable where Continuation: Sendable {}
extension FlightWaiters.Waiter: Sendable where Continuation: Sendable {}
extension SingleFlight: Sendable where Key: Sendable, Continuation: Sendable {}
