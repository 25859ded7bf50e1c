#if USER_SESSIONS_TSAN
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
#endif

/// Continuations whose hand-over ThreadSanitizer sees: the package awaits with `withVisible…Continuation` and
/// resumes with `resumeVisibly(…)`.
///
/// In release and debug builds these are exactly the standard library's continuations. In sanitizer builds
/// (`-DUSER_SESSIONS_TSAN`, set by `Scripts/tsan.sh`) they close a gap in the Swift runtime's own annotations: when a
/// continuation is resumed before its task has suspended, `swift_continuation_await` lets the task go on after an
/// atomic load that ThreadSanitizer cannot see (the concurrency runtime is not instrumented, and that fast path
/// carries no annotation). The resumer's writes, the value it hands over and the runtime's own reads of the waiting
/// task's frame inside `resume` then look unordered with everything the task does next, and TSan reports a race
/// that cannot happen. Here every resumption runs inside one process-wide pthread mutex, and every awaiting task
/// takes and releases that mutex once it goes on. A task that went on through the fast path therefore waits until
/// `resume` has returned, and TSan sees the order through the mutex it intercepts.
package enum Handoff {
    /// Enters the resumption section (sanitizer builds only).
    @inline(__always)
    package static func beginResume() {
        #if USER_SESSIONS_TSAN
        HandoffMutex.shared.lock()
        #endif
    }

    /// Leaves the resumption section (sanitizer builds only).
    @inline(__always)
    package static func endResume() {
        #if USER_SESSIONS_TSAN
        HandoffMutex.shared.unlock()
        #endif
    }

    /// Called by an awaiting task once it goes on: waits for the resumption that woke it to be over (sanitizer
    /// builds only).
    @inline(__always)
    package static func resumed() {
        #if USER_SESSIONS_TSAN
        HandoffMutex.shared.lock()
        HandoffMutex.shared.unlock()
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

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
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

extension UnsafeContinuation {
    /// `resume(returning:)` inside the hand-over section (see ``Handoff``).
    package func resumeVisibly(returning value: sending T) {
        Handoff.beginResume()
        defer { Handoff.endResume() }
        resume(returning: value)
    }

    /// `resume(throwing:)` inside the hand-over section (see ``Handoff``).
    package func resumeVisibly(throwing error: E) {
        Handoff.beginResume()
        defer { Handoff.endResume() }
        resume(throwing: error)
    }

    /// `resume(with:)` inside the hand-over section (see ``Handoff``).
    package func resumeVisibly(with result: sending Result<T, E>) {
        Handoff.beginResume()
        defer { Handoff.endResume() }
        resume(with: result)
    }
}

extension UnsafeContinuation where T == Void {
    /// `resume()` inside the hand-over section (see ``Handoff``).
    package func resumeVisibly() {
        Handoff.beginResume()
        defer { Handoff.endResume() }
        resume()
    }
}

extension CheckedContinuation {
    /// `resume(returning:)` inside the hand-over section (see ``Handoff``).
    package func resumeVisibly(returning value: sending T) {
        Handoff.beginResume()
        defer { Handoff.endResume() }
        resume(returning: value)
    }

    /// `resume(throwing:)` inside the hand-over section (see ``Handoff``).
    package func resumeVisibly(throwing error: E) {
        Handoff.beginResume()
        defer { Handoff.endResume() }
        resume(throwing: error)
    }

    /// `resume(with:)` inside the hand-over section (see ``Handoff``).
    package func resumeVisibly(with result: sending Result<T, E>) {
        Handoff.beginResume()
        defer { Handoff.endResume() }
        resume(with: result)
    }
}

extension CheckedContinuation where T == Void {
    /// `resume()` inside the hand-over section (see ``Handoff``).
    package func resumeVisibly() {
        Handoff.beginResume()
        defer { Handoff.endResume() }
        resume()
    }
}
