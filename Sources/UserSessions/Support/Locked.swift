#if USER_SESSIONS_TSAN
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
#else
import Synchronization
#endif

/// The package's one lock: a value that is read and changed only while it is locked.
///
/// Every piece of state the package (and its test support) shares between threads lives in a `Locked`. In release and
/// debug builds it is `Synchronization.Mutex`, with nothing added on the hot path. In sanitizer builds
/// (`Scripts/tsan.sh` compiles with `-DUSER_SESSIONS_TSAN`) it locks a pthread mutex instead: ThreadSanitizer on
/// Linux cannot see `Mutex`'s futex calls inside the uninstrumented runtime and would report every access behind it
/// as a race, but it intercepts `pthread_mutex_lock`, so with this lock it checks the package's own code.
///
/// - Important: `body` runs with the lock held. It must not suspend, call user code, resume a continuation or take
///   the same lock again; collect what has to happen and do it after `withLock` returns.
package struct Locked<Value: ~Copyable>: ~Copyable {
    #if USER_SESSIONS_TSAN
    @usableFromInline let storage: PthreadLockedStorage<Value>
    #else
    @usableFromInline let mutex: Mutex<Value>
    #endif

    /// A lock holding `initialValue`.
    @inlinable
    package init(_ initialValue: consuming sending Value) {
        #if USER_SESSIONS_TSAN
        storage = PthreadLockedStorage(initialValue)
        #else
        mutex = Mutex(initialValue)
        #endif
    }

    /// Runs `body` with exclusive access to the value and returns what it returns.
    @inlinable
    package borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        #if USER_SESSIONS_TSAN
        try storage.withLock(body)
        #else
        try mutex.withLock(body)
        #endif
    }
}

extension Locked: Sendable where Value: ~Copyable {}

#if USER_SESSIONS_TSAN
/// The sanitizer build's storage: a heap-allocated pthread mutex (it must never move, so it does not live inline in
/// a movable struct) and the value it protects, reached only through `withLock`.
// @unchecked: `value` is read and written only inside `withLock`, under `mutex`.
@usableFromInline
final class PthreadLockedStorage<Value: ~Copyable>: @unchecked Sendable {
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline let value: UnsafeMutablePointer<Value>

    @usableFromInline
    init(_ initialValue: consuming Value) {
        mutex = UnsafeMutablePointer.allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
        value = UnsafeMutablePointer.allocate(capacity: 1)
        value.initialize(to: initialValue)
    }

    deinit {
        value.deinitialize(count: 1)
        value.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inlinable
    func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }
}
#endif
