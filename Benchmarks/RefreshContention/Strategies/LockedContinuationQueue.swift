import Synchronization

/// A `Mutex` plus a queue of continuations: the first caller that finds the token expired refreshes it in its own
/// task; later callers park on an `UnsafeContinuation` until that one refresher resumes them, in FIFO order, after
/// releasing the lock.
///
/// Hot path: read the clock, lock, read and check, unlock. Cancellation of waiters is not handled (the benchmark
/// never cancels), which keeps this baseline as lean as such a design gets.
final class LockedContinuationQueue: TokenSource {
    private struct State {
        var token: String
        var expiresAt: Double
        var refreshing = false
        var waiters: [UnsafeContinuation<String?, any Error>] = []
    }

    private enum Decision {
        case fresh(String)
        case refresh(stale: String)
        case wait
    }

    private let state: Mutex<State>
    private let clock: BenchClock
    private let refresher: SimulatedRefresher

    init(token: String, expiresAt: Double, clock: BenchClock, refresher: SimulatedRefresher) {
        self.state = Mutex(State(token: token, expiresAt: expiresAt))
        self.clock = clock
        self.refresher = refresher
    }

    nonisolated(nonsending) func token() async throws -> String {
        let now = clock.seconds()
        let fresh = state.withLock { $0.expiresAt > now ? $0.token : nil }
        if let fresh { return fresh }
        return try await slowPath()
    }

    private nonisolated(nonsending) func slowPath() async throws -> String {
        while true {
            let now = clock.seconds()
            let decision = state.withLock { state -> Decision in
                if state.expiresAt > now { return .fresh(state.token) }
                if state.refreshing { return .wait }
                state.refreshing = true
                return .refresh(stale: state.token)
            }
            switch decision {
            case .fresh(let token):
                return token
            case .refresh(let stale):
                return try await refreshAndResumeWaiters(stale: stale)
            case .wait:
                // `nil` means the refresh ended between the decision and parking: decide again.
                let outcome = try await withUnsafeThrowingContinuation {
                    (continuation: UnsafeContinuation<String?, any Error>) in
                    let parked = state.withLock { state -> Bool in
                        guard state.refreshing else { return false }
                        state.waiters.append(continuation)
                        return true
                    }
                    if !parked { continuation.resume(returning: nil) }
                }
                if let token = outcome { return token }
            }
        }
    }

    private nonisolated(nonsending) func refreshAndResumeWaiters(stale: String) async throws -> String {
        let result: Result<SimulatedRefresher.Issued, any Error>
        do {
            result = .success(try await refresher.refresh(from: stale))
        } catch {
            result = .failure(error)
        }
        let waiters = state.withLock { state -> [UnsafeContinuation<String?, any Error>] in
            if case .success(let issued) = result {
                state.token = issued.token
                state.expiresAt = issued.expiresAt
            }
            state.refreshing = false
            let waiters = state.waiters
            state.waiters = []
            return waiters
        }
        let tokenResult = result.map { Optional($0.token) }
        for waiter in waiters { waiter.resume(with: tokenResult) }
        return try result.get().token
    }
}
