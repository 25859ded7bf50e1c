import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The wall clock the controller uses to judge expiry and to time its background work (retries of failed
/// writes).
///
/// ``system`` reads a coarse real-time clock (a few milliseconds of resolution, far finer than any refresh
/// lead time) because it is read on every token request. Tests use ``custom(now:sleepUntil:)`` with a manual
/// clock.
public struct SessionClock: Sendable {
    enum Storage: Sendable {
        case system
        case custom(now: @Sendable () -> Date, sleepUntil: (@Sendable (Date) async throws -> Void)?)
    }
    let storage: Storage

    /// The system clock.
    public static var system: SessionClock { SessionClock(storage: .system) }

    /// A clock whose time is given by `now`, for tests and simulations.
    ///
    /// Background timers of a controller on this clock sleep in real time for the difference to their deadline
    /// and then read `now` again, so they fire once this clock has passed the deadline. Use
    /// ``custom(now:sleepUntil:)`` to drive them from the clock itself.
    public static func custom(_ now: @escaping @Sendable () -> Date) -> SessionClock {
        SessionClock(storage: .custom(now: now, sleepUntil: nil))
    }

    /// A clock whose time is given by `now` and whose timers wait with `sleepUntil`, for tests and simulations.
    ///
    /// - Parameters:
    ///   - now: The current time.
    ///   - sleepUntil: Suspends until `now()` has reached the given date (returning at once when it has), and
    ///     throws `CancellationError` promptly when the calling task is cancelled.
    public static func custom(
        now: @escaping @Sendable () -> Date, sleepUntil: @escaping @Sendable (Date) async throws -> Void
    ) -> SessionClock {
        SessionClock(storage: .custom(now: now, sleepUntil: sleepUntil))
    }

    /// Suspends until this clock reads `deadline` (seconds since the reference date) or later.
    ///
    /// - Throws: `CancellationError` when the calling task is cancelled.
    func sleep(until deadline: Double) async throws {
        if case .custom(_, let sleepUntil?) = storage {
            try await sleepUntil(Date(timeIntervalSinceReferenceDate: deadline))
            return
        }
        while true {
            let remaining = deadline - nowSeconds()
            if remaining <= 0 { return }
            try await Task.sleep(for: .seconds(remaining))
        }
    }

    /// The current time.
    public func now() -> Date { Date(timeIntervalSinceReferenceDate: nowSeconds()) }

    /// Whether this is ``system``.
    var isSystem: Bool {
        if case .system = storage { return true }
        return false
    }

    /// The current time as seconds since the reference date; the cheap form used on the hot path.
    func nowSeconds() -> Double {
        switch storage {
        case .system: return Self.coarseSystemSeconds()
        case .custom(let now, _): return now().timeIntervalSinceReferenceDate
        }
    }

    static func coarseSystemSeconds() -> Double {
        #if os(Linux)
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &spec)
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1_000_000_000 - Date.timeIntervalBetween1970AndReferenceDate
        #else
        return Date().timeIntervalSinceReferenceDate
        #endif
    }
}
