import UserSessions

/// A one-shot gate: tasks ``wait()`` until the test calls ``open()``. Waiting after opening returns at once.
final class AsyncGate: Sendable {
    private struct State {
        var isOpen = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Locked(State())

    init() {}

    /// Suspends until the gate opens.
    func wait() async {
        await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { state -> Bool in
                if state.isOpen { return true }
                state.waiters.append(continuation)
                return false
            }
            if resumeNow { continuation.resumeVisibly() }
        }
    }

    /// Opens the gate and releases every waiter, in arrival order.
    func open() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.isOpen = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resumeVisibly() }
    }

    /// How many tasks are waiting.
    var waiterCount: Int { state.withLock { $0.waiters.count } }
}

/// Counts arrivals and lets a test wait until a number of them happened, without sleeping.
final class ArrivalCounter: Sendable {
    private struct State {
        var count = 0
        var waiters: [(target: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }
    private let state = Locked(State())

    init() {}

    /// Records one arrival.
    func arrive() {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.count += 1
            let count = state.count
            let ready = state.waiters.filter { $0.target <= count }.map(\.continuation)
            state.waiters.removeAll { $0.target <= count }
            return ready
        }
        for continuation in ready { continuation.resumeVisibly() }
    }

    /// The number of arrivals so far.
    var count: Int { state.withLock { $0.count } }

    /// Suspends until at least `target` arrivals happened.
    func wait(for target: Int) async {
        await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { state -> Bool in
                if state.count >= target { return true }
                state.waiters.append((target, continuation))
                return false
            }
            if resumeNow { continuation.resumeVisibly() }
        }
    }
}

/// Holds the next task that passes (``pass()``) at a gate the test set (``hold(until:)``), once, and counts the tasks
/// it held (``held``): a scripted store's next read, a gate's next commit.
final class NextPassHold: Sendable {
    private let gate = Locked<AsyncGate?>(nil)
    /// One arrival per task held.
    let held = ArrivalCounter()

    init() {}

    /// Holds the next task that passes until `gate` opens.
    func hold(until gate: AsyncGate) {
        self.gate.withLock { $0 = gate }
    }

    /// Passes: waits at the gate set by ``hold(until:)``, if one is set (and unsets it), else returns at once.
    func pass() async {
        guard
            let gate = gate.withLock({ gate in
                defer { gate = nil }; return gate
            })
        else { return }
        held.arrive()
        await gate.wait()
    }
}
