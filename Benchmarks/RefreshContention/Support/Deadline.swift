import Dispatch
import Foundation
import Synchronization

/// Thrown when one benchmark run did not finish within its time limit.
struct DeadlineExceeded: Error, CustomStringConvertible {
    var limit: Duration
    var description: String { "did not finish within \(limit) (its tasks are left behind and may disturb later runs)" }
}

/// Runs `operation` in its own task and returns its result, or throws ``DeadlineExceeded`` after `limit`.
///
/// The operation runs unstructured on purpose: a strategy that never resumes its callers would keep a task group
/// (which always awaits its children) waiting forever. On timeout the operation is cancelled and left behind; the
/// benchmark reports the run as failed and moves on.
///
/// The timers run on ``TimerQueue``, outside Swift's cooperative thread pool: tasks that never suspend can occupy
/// every thread of that pool, and a `Task.sleep` timer would then never fire. If even the caller cannot be resumed for
/// twice the limit, the process reports it and exits with status 2 rather than hang.
func withDeadline<T: Sendable>(
    _ limit: Duration,
    operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    let hardStop = DispatchWorkItem {
        Progress.note("RefreshContention: a run made no progress for \(limit * 2); exiting with status 2")
        exit(2)
    }
    TimerQueue.queue.asyncAfter(deadline: .now() + (limit * 2).dispatchInterval, execute: hardStop)
    defer { hardStop.cancel() }

    let race = DeadlineRace<T>()
    return try await withUnsafeThrowingContinuation { continuation in
        race.begin(continuation)
        race.attach(
            work: Task {
                let result: Result<T, any Error>
                do {
                    result = .success(try await operation())
                } catch {
                    result = .failure(error)
                }
                race.finish(result)
            })
        // Once the work has finished first, this timer finds the race over and does nothing.
        TimerQueue.after(limit) { race.finish(.failure(DeadlineExceeded(limit: limit))) }
    }
}

/// The shared state of one ``withDeadline(_:operation:)`` call: whoever finishes first resumes the caller.
private final class DeadlineRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: UnsafeContinuation<T, any Error>?
        var work: Task<Void, Never>?
        var finished = false
    }
    private let state = Mutex(State())

    func begin(_ continuation: UnsafeContinuation<T, any Error>) {
        state.withLock { $0.continuation = continuation }
    }

    func attach(work: Task<Void, Never>) {
        state.withLock { state in
            if !state.finished { state.work = work }
        }
    }

    func finish(_ result: Result<T, any Error>) {
        let taken = state.withLock { state -> (UnsafeContinuation<T, any Error>?, Task<Void, Never>?) in
            guard !state.finished else { return (nil, nil) }
            state.finished = true
            defer {
                state.continuation = nil
                state.work = nil
            }
            return (state.continuation, state.work)
        }
        guard let continuation = taken.0 else { return }
        if case .failure(let error) = result, error is DeadlineExceeded {
            taken.1?.cancel()
        }
        continuation.resume(with: result)
    }
}

extension Duration {
    /// The duration as a Dispatch interval (whole nanoseconds).
    var dispatchInterval: DispatchTimeInterval {
        .nanoseconds(Int(min(inNanoseconds, Double(Int.max / 2))))
    }
}
