import Synchronization

/// Awaits `task` for at most `timeout`.
///
/// Returns `true` when the task finished in time, `false` when the deadline passed first. The task is neither
/// cancelled nor awaited further: the caller decides what to do with a task that overran (cancel it, leave it
/// behind). The caller's own cancellation does not shorten the wait, because the paths that use this (stopping
/// services, the last write of credentials) must run to the end even when the caller was cancelled.
///
/// `sleep` waits out the deadline: real time by default; a path timed by the configuration's ``SessionClock``
/// passes that clock's sleep, so tests drive the deadline with a manual clock. It must throw when its task is
/// cancelled (the timer is cancelled once the task finished in time).
func awaitTask(
    _ task: Task<Void, Never>, timeout: Duration,
    sleep: @escaping @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) }
) async -> Bool {
    await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
        let race = DeadlineRace(continuation)
        let waiter = Task {
            await task.value
            race.finish(inTime: true)
        }
        let timer = Task {
            // A cancelled sleep means the task finished in time and cancelled this timer.
            guard (try? await sleep(timeout)) != nil else { return }
            race.finish(inTime: false)
        }
        race.attach(waiter: waiter, timer: timer)
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
    func attach(waiter: Task<Void, Never>, timer: Task<Void, Never>) {
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
