import Foundation
import Synchronization

@testable import UserSessions

/// A wall clock that moves only when the test says so.
final class ManualTime: Sendable {
    private let current: Mutex<Date>

    init(_ start: Date = Date(timeIntervalSinceReferenceDate: 800_000_000)) {
        current = Mutex(start)
    }

    /// The current time.
    var now: Date { current.withLock { $0 } }

    /// Moves the clock forward.
    func advance(by seconds: TimeInterval) {
        current.withLock { $0 = $0.addingTimeInterval(seconds) }
    }

    /// A ``SessionClock`` reading this time.
    var clock: SessionClock { .custom { [self] in self.now } }
}
