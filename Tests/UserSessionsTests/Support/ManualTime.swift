import Foundation

@testable import UserSessions

/// A wall clock that moves only when the test says so. Timers sleeping on it (``clock``) wake up when
/// ``advance(by:)`` moves it past their deadline, never by real time.
final class ManualTime: Sendable {
    private struct Sleeper {
        let id: UInt64
        let deadline: Date
        let continuation: CheckedContinuation<Void, any Error>
    }
    private struct State {
        var now: Date
        var nextID: UInt64 = 0
        var sleepers: [Sleeper] = []
    }
    private let state: Locked<State>
    /// One arrival per sleep that starts waiting (not for one whose deadline had passed already).
    let sleeps = ArrivalCounter()

    init(_ start: Date = Date(timeIntervalSinceReferenceDate: 800_000_000)) {
        state = Locked(State(now: start))
    }

    /// The current time.
    var now: Date { state.withLock { $0.now } }

    /// How many timers are sleeping now.
    var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    /// Moves the clock forward and wakes the timers whose deadline it reached, earliest first.
    func advance(by seconds: TimeInterval) {
        let due = state.withLock { state -> [Sleeper] in
            state.now = state.now.addingTimeInterval(seconds)
            let now = state.now
            let due = state.sleepers.filter { $0.deadline <= now }.sorted { $0.deadline < $1.deadline }
            state.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        for sleeper in due { sleeper.continuation.resumeVisibly() }
    }

    /// Moves the clock 61 s (past any retry's backoff, at most 60 s) each time a timer starts sleeping, while
    /// `waiting` holds; yields in between. Never more often: a loop that advanced on every yield would, on a slow run,
    /// carry the clock past an access token's lifetime and cause a refresh the test does not expect.
    func advanceOnEachSleep(while waiting: () async -> Bool) async {
        var seen = 0
        while await waiting() {
            let started = sleeps.count
            if started > seen {
                seen = started
                advance(by: 61)
            }
            await Task.yield()
        }
    }

    /// Suspends until the clock reaches `deadline`; throws `CancellationError` when the task is cancelled.
    func sleep(until deadline: Date) async throws {
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withVisibleCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome = state.withLock { state -> Result<Void, any Error>? in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if deadline <= state.now { return .success(()) }
                    state.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return nil
                }
                if let outcome {
                    continuation.resumeVisibly(with: outcome)
                } else {
                    sleeps.arrive()
                }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> Sleeper? in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.sleepers.remove(at: index)
            }
            sleeper?.continuation.resumeVisibly(throwing: CancellationError())
        }
    }

    /// A ``DeadlineClock`` on this time: a deadline of `d` passes once ``advance(by:)`` has moved the clock `d`
    /// past the moment the deadline started waiting.
    var deadlineClock: DeadlineClock {
        DeadlineClock { [self] duration in try await self.sleep(until: self.now.addingTimeInterval(duration.seconds)) }
    }

    /// A ``SessionClock`` reading this time, whose timers sleep on it.
    var clock: SessionClock {
        .custom(now: { [self] in self.now }, sleepUntil: { [self] deadline in try await self.sleep(until: deadline) })
    }
}
