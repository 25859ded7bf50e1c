import Foundation
import Synchronization
import UserSessions

/// The time every strategy of one run judges expiry by, as seconds since the reference date.
///
/// `.system` reads ``SessionClock/system`` (the coarse real-time clock the controller uses by default), so the
/// baselines pay the same price for a clock read as the controller; `.manual` reads a ``ManualTime`` that the
/// benchmark advances to make a token expire at an exact moment.
struct BenchClock: Sendable {
    private enum Source: Sendable {
        case system
        case manual(ManualTime)
    }
    private let source: Source
    /// The same time, as the controller sees it.
    let sessionClock: SessionClock

    static var system: BenchClock { BenchClock(source: .system, sessionClock: .system) }

    static func manual(_ time: ManualTime) -> BenchClock {
        BenchClock(source: .manual(time), sessionClock: .custom { time.date() })
    }

    func seconds() -> Double {
        switch source {
        case .system: return sessionClock.now().timeIntervalSinceReferenceDate
        case .manual(let time): return time.seconds()
        }
    }
}

/// A clock that only moves when told to.
final class ManualTime: Sendable {
    private let nanoseconds: Atomic<Int64>

    init(seconds: Double) {
        nanoseconds = Atomic(Int64(seconds * 1e9))
    }

    func seconds() -> Double { Double(nanoseconds.load(ordering: .acquiring)) / 1e9 }

    func date() -> Date { Date(timeIntervalSinceReferenceDate: seconds()) }

    func advance(by seconds: Double) {
        nanoseconds.add(Int64(seconds * 1e9), ordering: .releasing)
    }
}
