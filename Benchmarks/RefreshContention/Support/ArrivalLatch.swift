import Synchronization

/// A one-shot latch that opens when `expected` arrivals have been counted; waiting on an open latch returns at
/// once.
///
/// ``arrive()`` is one atomic increment, so counting arrivals adds the same small cost to every strategy.
final class ArrivalLatch: Sendable {
    private let expected: Int
    private let arrivals = Atomic<Int>(0)
    private let waiters = Mutex<[UnsafeContinuation<Void, Never>]>([])

    init(expected: Int) {
        self.expected = expected
    }

    var isOpen: Bool { arrivals.load(ordering: .acquiring) >= expected }

    /// Counts one arrival; the arrival that reaches `expected` resumes every waiter.
    func arrive() {
        let count = arrivals.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue
        guard count == expected else { return }
        // Waiters check the count under the same lock before parking, so none can be missed here.
        let parked = waiters.withLock { waiters -> [UnsafeContinuation<Void, Never>] in
            let parked = waiters
            waiters = []
            return parked
        }
        for continuation in parked { continuation.resume() }
    }

    /// Returns once the latch is open.
    func wait() async {
        if isOpen { return }
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let open = waiters.withLock { waiters -> Bool in
                if isOpen { return true }
                waiters.append(continuation)
                return false
            }
            if open { continuation.resume() }
        }
    }
}
