import Dispatch

/// Where the benchmark's timers run.
///
/// On Linux, Swift's cooperative executor and `DispatchQueue.global()` share libdispatch's pool, which holds one
/// thread per core. Tasks that never suspend (a strategy whose hot path returns synchronously, looping for
/// seconds) can occupy all of them, and a timer on that pool, like a `Task.sleep`, would not fire until they
/// stop. A serial queue of our own targets an overcommitting root queue, which gets a thread of its own.
enum TimerQueue {
    static let queue = DispatchQueue(label: "RefreshContention.timers")

    /// Runs `action` after `delay`, even when the cooperative pool is saturated.
    static func after(_ delay: Duration, _ action: @escaping @Sendable () -> Void) {
        queue.asyncAfter(deadline: .now() + delay.dispatchInterval, execute: action)
    }
}
