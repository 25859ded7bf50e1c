import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The wall clock the controller uses to judge expiry.
///
/// ``system`` reads a coarse real-time clock (a few milliseconds of resolution, far finer than any refresh
/// lead time) because it is read on every token request. Tests use ``custom(_:)`` with a manual clock.
public struct SessionClock: Sendable {
    enum Storage: Sendable {
        case system
        case custom(@Sendable () -> Date)
    }
    let storage: Storage

    /// The system clock.
    public static var system: SessionClock { SessionClock(storage: .system) }

    /// A clock whose time is given by `now`, for tests and simulations.
    public static func custom(_ now: @escaping @Sendable () -> Date) -> SessionClock {
        SessionClock(storage: .custom(now))
    }

    /// The current time.
    public func now() -> Date { Date(timeIntervalSinceReferenceDate: nowSeconds()) }

    /// The current time as seconds since the reference date; the cheap form used on the hot path.

    func nowSeconds() -> Double {
        switch storage {
        case .system: return Self.coarseSystemSeconds()
        case .custom(let now): return now().timeIntervalSinceReferenceDate
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
