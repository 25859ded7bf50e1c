import Synchronization

/// Releases a known number of tasks together: each task parks on the gate, the driver waits until all of them
/// have arrived and then opens it.
///
/// Parked tasks are resumed in arrival order (FIFO), after the lock is released.
final class StartGate: Sendable {
    private struct State {
        var expected: Int
        var arrived = 0
        var isOpen = false
        var parked: [UnsafeContinuation<Void, Never>] = []
        var driver: UnsafeContinuation<Void, Never>?
    }
    private let state: Mutex<State>

    init(expected: Int) {
        var initial = State(expected: expected)
        initial.parked.reserveCapacity(expected)
        state = Mutex(initial)
    }

    /// Counts the caller as arrived and suspends it until ``open()`` (returns at once if the gate is open).
    func arriveAndWait() async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let (passThrough, driver) = state.withLock { state -> (Bool, UnsafeContinuation<Void, Never>?) in
                state.arrived += 1
                var driver: UnsafeContinuation<Void, Never>?
                if state.arrived == state.expected {
                    driver = state.driver
                    state.driver = nil
                }
                if state.isOpen { return (true, driver) }
                state.parked.append(continuation)
                return (false, driver)
            }
            driver?.resume()
            if passThrough { continuation.resume() }
        }
    }

    /// Returns once every expected task has arrived.
    func waitForArrivals() async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let ready = state.withLock { state -> Bool in
                if state.arrived >= state.expected { return true }
                state.driver = continuation
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// Opens the gate: every parked task resumes, in arrival order.
    func open() {
        let parked = state.withLock { state -> [UnsafeContinuation<Void, Never>] in
            state.isOpen = true
            let parked = state.parked
            state.parked = []
            return parked
        }
        for continuation in parked { continuation.resume() }
    }
}
