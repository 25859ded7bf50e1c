import Synchronization

/// What a deadline waits on: real time in production, a clock that moves only when a test says so in tests.
///
/// Every timeout of the package (stopping a service, flushing the last write, an HTTP exchange, a transport's own
/// timer) waits through one of these, so a timeout test can advance a manual clock instead of sleeping.
package struct DeadlineClock: Sendable {
    /// Suspends for the given duration; throws `CancellationError` promptly when the calling task is cancelled.
    let sleep: @Sendable (Duration) async throws -> Void

    /// A clock whose waits are `sleep`.
    package init(sleep: @escaping @Sendable (Duration) async throws -> Void) {
        self.sleep = sleep
    }

    /// Real time: `Task.sleep(for:)`.
    package static let realTime = DeadlineClock { duration in try await Task.sleep(for: duration) }
}

/// The package's one deadline helper. Three ways to put a deadline on work, all timed by a ``DeadlineClock``:
/// - ``timer(after:clock:_:)``: call something once the deadline passes, unless cancelled first;
/// - ``wait(for:timeout:clock:)``: wait for a task at most until the deadline and leave it behind after that;
/// - ``run(within:clock:timedOut:_:)``: run an operation and cancel it at the deadline.
package enum Deadline {
    /// Calls `expire` once `timeout` has passed on `clock`, unless the returned task is cancelled first.
    @discardableResult
    package static func timer(
        after timeout: Duration, clock: DeadlineClock = .realTime, _ expire: @escaping @Sendable () -> Void
    ) -> Task<Void, Never> {
        Task {
            // A cancelled sleep means the work finished in time and cancelled this timer.
            guard (try? await clock.sleep(timeout)) != nil else { return }
            expire()
        }
    }

    /// Awaits `task` for at most `timeout`.
    ///
    /// Returns `true` when the task finished in time, `false` when the deadline passed first. The task is neither
    /// cancelled nor awaited further: the caller decides what to do with a task that overran (cancel it, leave it
    /// behind). The caller's own cancellation does not shorten the wait, because the paths that use this (stopping
    /// services, the last write of credentials) must run to the end even when the caller was cancelled.
    package static func wait<Success, Failure>(
        for task: Task<Success, Failure>, timeout: Duration, clock: DeadlineClock = .realTime
    ) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let race = DeadlineRace(continuation)
            Task {
                _ = await task.result
                race.finish(inTime: true)
            }
            race.attach(timer: timer(after: timeout, clock: clock) { race.finish(inTime: false) })
        }
    }

    /// Runs `operation`, cancelling it once `timeout` has passed on `clock`.
    ///
    /// The operation runs in a task of its own, cancelled too when the calling task is cancelled. After the
    /// deadline this waits for the operation to return from its cancellation, so nothing it does outlives the call.
    ///
    /// - Throws: what `operation` throws, or `timedOut()` when the deadline came first.
    package static func run<Value: Sendable>(
        within timeout: Duration,
        clock: DeadlineClock = .realTime,
        timedOut: @Sendable () -> any Error,
        _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let task = Task { try await operation() }
        let inTime = await withTaskCancellationHandler {
            await wait(for: task, timeout: timeout, clock: clock)
        } onCancel: {
            task.cancel()
        }
        guard inTime else {
            task.cancel()
            _ = await task.result
            throw timedOut()
        }
        return try await task.value
    }
}

/// The one-shot race between a task and its deadline: whichever comes first resumes the continuation.
private final class DeadlineRace: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Bool, Never>?
        var timer: Task<Void, Never>?
        var finished = false
    }
    private let state: Mutex<State>

    init(_ continuation: CheckedContinuation<Bool, Never>) {
        state = Mutex(State(continuation: continuation))
    }

    /// Keeps the timer so that a task finishing in time can cancel it (it would otherwise sleep on).
    func attach(timer: Task<Void, Never>) {
        let cancelNow = state.withLock { state -> Bool in
            if state.finished { return true }
            state.timer = timer
            return false
        }
        if cancelNow { timer.cancel() }
    }

    func finish(inTime: Bool) {
        let (continuation, timer) = state.withLock { state in
            state.finished = true
            defer {
                state.continuation = nil
                state.timer = nil
            }
            return (state.continuation, state.timer)
        }
        timer?.cancel()
        continuation?.resume(returning: inTime)
    }
}
