/// The one interface every strategy is measured through: "give me a valid access token".
///
/// The requirement is `nonisolated(nonsending)`: a call runs on the caller's executor, so a strategy whose hot
/// path never suspends (a lock-protected read) costs no executor switch, exactly as
/// ``UserSessions/UserSessionController/accessToken()`` is declared. Actor-based strategies still hop to their
/// actor, which is the cost they are here to show.
protocol TokenSource: Sendable {
    /// A valid access token, refreshing through the shared ``SimulatedRefresher`` when the current one expired.
    nonisolated(nonsending) func token() async throws -> String
}

/// The strategies measured side by side. Raw values are the names used in the tables and the JSON output.
enum Strategy: String, CaseIterable, Sendable {
    /// The library as this benchmark measures its gate: loop breaker out of the way (the storm refreshes hundreds
    /// of times a second), lead time and proactive window as the scenario sets them.
    case userSessionController = "UserSessionController"
    /// The library as users run it: the default configuration (loop breaker on: more than 3 refreshes within
    /// 30 s trip it), only the clock is the scenario's.
    case userSessionControllerDefault = "UserSessionController (default)"
    case naiveActor = "NaiveActor"
    case actorCachedTask = "ActorCachedTask"
    case lockedContinuationQueue = "LockedContinuationQueue"
    case bareMutexRead = "BareMutexRead"

    /// Strategies that promise one refresh per expiry; a second refresh of the same token fails the benchmark.
    var coalesces: Bool {
        switch self {
        case .userSessionController, .userSessionControllerDefault, .actorCachedTask, .lockedContinuationQueue:
            return true
        case .naiveActor, .bareMutexRead: return false
        }
    }

    /// Every strategy: the hot-path workload.
    static let hotPath: [Strategy] = allCases

    /// Strategies that can refresh: the contention and storm workloads (`BareMutexRead` only reads).
    static let refreshing: [Strategy] = [
        .userSessionController, .userSessionControllerDefault, .naiveActor, .actorCachedTask,
        .lockedContinuationQueue,
    ]

    /// The real libraries or idioms whose strategy a baseline reproduces (facts only), for the report.
    var peer: String {
        switch self {
        case .userSessionController, .userSessionControllerDefault:
            return "this package"
        case .naiveActor:
            return "an actor that awaits the refresh call itself; reentrancy lets every caller refresh"
        case .actorCachedTask:
            return "the pattern of supabase-swift's session manager (an actor caching the in-flight refresh Task)"
        case .lockedContinuationQueue:
            return "the pattern of Alamofire's AuthenticationInterceptor (a lock, one refresh, a queue of waiters)"
        case .bareMutexRead:
            return "the floor: a Mutex read of a token that never expires"
        }
    }
}
