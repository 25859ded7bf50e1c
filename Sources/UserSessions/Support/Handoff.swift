#if USER_SESSIONS_TSAN
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
#endif

/// Continuations whose hand-over ThreadSanitizer sees: awaited with `withVisible…Continuation` and resumed with
/// `resumeVisibly(…)`. The package itself uses them through ``Parked`` only, the one way it suspends a caller (the
/// tests' harness uses them directly).
///
/// In release and debug builds these are exactly the standard library's continuations. In sanitizer builds
/// (`-DUSER_SESSIONS_TSAN`, set by `Scripts/tsan.sh`) they close a gap in the Swift runtime's own annotations: when a
/// continuation is resumed before its task has suspended, `swift_continuation_await` lets the task go on after an
/// atomic load that ThreadSanitizer cannot see (the concurrency runtime is not instrumented, and that fast path
/// carries no annotation). Everything the resumer wrote before resuming (the value it hands over, the objects it
/// made) then looks unordered with everything the task does next, and TSan reports a race that cannot happen. Here
/// the resumer takes and releases one process-wide pthread mutex just before it resumes, and the awaiting task takes
/// and releases it once it goes on, so TSan sees the order through a mutex it intercepts. The mutex is never held
/// while `resume` runs. The runtime's own reads of the waiting task's frame inside `resume` are covered by the
/// suppressions of the standard library's continuation functions in `Scripts/tsan-suppressions.txt`.
package enum Handoff {
    /// Publishes what the resumer wrote so far, just before a resumption (sanitizer builds only).
    @inline(__always)
    package static func beforeResume() {
        #if USER_SESSIONS_TSAN
        HandoffMutex.shared.pass()
        #endif
    }

    /// Called by an awaiting task once it goes on: takes in what its resumer published (sanitizer builds only).
    @inline(__always)
    package static func resumed() {
        #if USER_SESSIONS_TSAN
        HandoffMutex.shared.pass()
        #endif
    }
}

#if USER_SESSIONS_TSAN
/// The sanitizer build's one hand-over mutex.
// @unchecked: the only state is the pthread mutex itself, which is made for sharing between threads.
final class HandoffMutex: @unchecked Sendable {
    static let shared = HandoffMutex()
    let mutex: UnsafeMutablePointer<pthread_mutex_t>

    private init() {
        mutex = UnsafeMutablePointer.allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
    }

    /// Takes and releases the mutex: a release for what this thread wrote before, an acquire of what the threads
    /// that passed before it wrote.
    func pass() {
        pthread_mutex_lock(mutex)
        pthread_mutex_unlock(mutex)
    }
}
#endif

/// `withUnsafeContinuation`, with a hand-over ThreadSanitizer sees (see ``Handoff``).
package func withVisibleUnsafeContinuation<T>(
    isolation: isolated (any Actor)? = #isolation, _ body: (UnsafeContinuation<T, Never>) -> Void
) async -> sending T {
    let value = await withUnsafeContinuation(isolation: isolation, body)
    Handoff.resumed()
    return value
}

/// `withUnsafeThrowingContinuation`, with a hand-over ThreadSanitizer sees (see ``Handoff``).
package func withVisibleUnsafeThrowingContinuation<T>(
    isolation: isolated (any Actor)? = #isolation, _ body: (UnsafeContinuation<T, any Error>) -> Void
) async throws -> sending T {
    do {
        let value = try await withUnsafeThrowingContinuation(isolation: isolation, body)
        Handoff.resumed()
        return value
    } catch {
        Handoff.resumed()
        throw error
    }
}

/// `withCheckedContinuation`, with a hand-over ThreadSanitizer sees (see ``Handoff``).
package func withVisibleCheckedContinuation<T>(
    isolation: isolated (any Actor)? = #isolation, function: String = #function,
    _ body: (CheckedContinuation<T, Never>) -> Void
) async -> sending T {
    let value = await withCheckedContinuation(isolation: isolation, function: function, body)
    Handoff.resumed()
    return value
}

/// `withCheckedThrowingContinuation`, with a hand-over ThreadSanitizer sees (see ``Handoff``).
package func withVisibleCheckedThrowingContinuation<T>(
    isolation: isolated (any Actor)? = #isolation, function: String = #function,
    _ body: (CheckedContinuation<T, any Error>) -> Void
) async throws -> sending T {
    do {
        let value = try await withCheckedThrowingContinuation(isolation: isolation, function: function, body)
        Handoff.resumed()
        return value
    } catch {
        Handoff.resumed()
        throw error
    }
}

/// The resumptions `UnsafeContinuation` and `CheckedContinuation` share, so that ``resumeVisibly(returning:)`` and
/// its siblings are written once for both.
package protocol ResumableContinuation<Success, Failure> {
    /// The value the awaiting task receives.
    associatedtype Success
    /// The error the awaiting task may receive.
    associatedtype Failure: Error
    /// Resumes the awaiting task with `value`.
    func resume(returning value: sending Success)
    /// Resumes the awaiting task by throwing `error`.
    func resume(throwing error: Failure)
    /// Resumes the awaiting task with `result`.
    func resume(with result: sending Result<Success, Failure>)
}

extension UnsafeContinuation: ResumableContinuation {}
extension CheckedContinuation: ResumableContinuation {}

extension ResumableContinuation {
    /// `resume(returning:)` after publishing what was written before it (see ``Handoff``).
    package func resumeVisibly(returning value: sending Success) {
        Handoff.beforeResume()
        resume(returning: value)
    }

    /// `resume(throwing:)` after publishing what was written before it (see ``Handoff``).
    package func resumeVisibly(throwing error: Failure) {
        Handoff.beforeResume()
        resume(throwing: error)
    }

    /// `resume(with:)` after publishing what was written before it (see ``Handoff``).
    package func resumeVisibly(with result: sending Result<Success, Failure>) {
        Handoff.beforeResume()
        resume(with: result)
    }
}

extension ResumableContinuation where Success == Void {
    /// `resume()` after publishing what was written before it (see ``Handoff``).
    package func resumeVisibly() {
        Handoff.beforeResume()
        resume(returning: ())
    }
}
