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
    case userSessionController = "UserSessionController"
    case naiveActor = "NaiveActor"
    case actorCachedTask = "ActorCachedTask"
    case lockedContinuationQueue = "LockedContinuationQueue"
    case bareMutexRead = "BareMutexRead"

    /// Strategies that promise one refresh per expiry; a second refresh of the same token fails the benchmark.
    var coalesces: Bool {
        switch self {
        case .userSessionController, .actorCachedTask, .lockedContinuationQueue: return true
        case .naiveActor, .bareMutexRead: return false
        }
    }

    /// Every strategy: the hot-path workload.
    static let hotPath: [Strategy] = allCases

    /// Strategies that can refresh: the contention and storm workloads (`BareMutexRead` only reads).
    static let refreshing: [Strategy] = [
        .userSessionController, .naiveActor, .actorCachedTask, .lockedContinuationQueue,
    ]
}
