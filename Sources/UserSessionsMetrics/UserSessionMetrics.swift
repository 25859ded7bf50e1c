#if Metrics
import CoreMetrics
import UserSessions

/// Reports what controllers and registries do to swift-metrics.
///
/// Add it to ``UserSessionController/Configuration/observers`` (or use `configuration.metrics()`); a registry's
/// controllers share it, so one instance counts every user. Dimensions are bounded: outcomes and failure classes,
/// never an identifier. With the default prefix `user_sessions`:
///
/// | metric | kind | dimensions |
/// |---|---|---|
/// | `user_sessions_refreshes_total` | counter | `outcome` (`succeeded`, `failed`, `discarded`), `failure_class` when failed |
/// | `user_sessions_refresh_duration` | timer | `outcome` |
/// | `user_sessions_refresh_waiters_total` | counter: callers that got a shared refresh's result | |
/// | `user_sessions_replays_total` | counter: operations replayed after an authentication failure | |
/// | `user_sessions_refresh_loop_trips_total` | counter | |
/// | `user_sessions_persistence_failures_total` | counter | |
/// | `user_sessions_evictions_total` | counter: controllers a registry dropped | |
/// | `user_sessions_revocation_failures_total` | counter: sign-outs whose revocation failed or overran | `failure_class` |
/// | `user_sessions_open` | meter: sessions open now | |
/// | `user_sessions_client_token_requests_total` | counter: token requests of a ``UserSessions/ClientCredentialsTokenManager`` | `outcome` (`issued`, `adopted`, `failed`, `rejected`), `failure_class` when failed |
/// | `user_sessions_client_token_request_duration` | timer | `outcome` |
/// | `user_sessions_client_token_waiters_total` | counter: callers that got a shared token request's answer | |
public struct UserSessionMetrics: UserSessionObserver {
    private let refreshesSucceeded: Counter
    private let refreshesDiscarded: Counter
    private let refreshesFailed: [RefreshFailureClass: Counter]
    private let refreshDurations: [UserSessionRefreshReport.Outcome: Timer]
    private let refreshWaiters: Counter
    private let replays: Counter
    private let loopTrips: Counter
    private let persistenceFailures: Counter
    private let evictions: Counter
    private let revocationFailures: [RefreshFailureClass: Counter]
    private let openSessions: Meter
    private let clientTokens: [String: Counter]
    private let clientTokenDurations: [String: Timer]
    private let clientTokenWaiters: Counter

    /// Creates the metrics.
    ///
    /// - Parameters:
    ///   - prefix: Starts every label. Default `user_sessions`.
    ///   - dimensions: Added to every metric, for example `[("service", "api")]`. Keep them bounded.
    ///   - factory: Makes the metrics. Default: the one bootstrapped in `MetricsSystem`.
    public init(
        prefix: String = "user_sessions",
        dimensions: [(String, String)] = [],
        factory: any MetricsFactory = MetricsSystem.factory
    ) {
        func counter(_ name: String, _ extra: [(String, String)] = []) -> Counter {
            Counter(label: "\(prefix)_\(name)", dimensions: dimensions + extra, factory: factory)
        }
        refreshesSucceeded = counter("refreshes_total", [("outcome", "succeeded")])
        refreshesDiscarded = counter("refreshes_total", [("outcome", "discarded")])
        let classes: [RefreshFailureClass] = [.terminal, .misconfiguration, .transient, .cancelled]
        var failed: [RefreshFailureClass: Counter] = [:]
        var revocationFailures: [RefreshFailureClass: Counter] = [:]
        for failureClass in classes {
            failed[failureClass] = counter(
                "refreshes_total", [("outcome", "failed"), ("failure_class", failureClass.rawValue)])
            revocationFailures[failureClass] = counter(
                "revocation_failures_total", [("failure_class", failureClass.rawValue)])
        }
        refreshesFailed = failed
        self.revocationFailures = revocationFailures
        var durations: [UserSessionRefreshReport.Outcome: Timer] = [:]
        for outcome in [UserSessionRefreshReport.Outcome.succeeded, .failed, .discarded] {
            durations[outcome] = Timer(
                label: "\(prefix)_refresh_duration", dimensions: dimensions + [("outcome", outcome.rawValue)],
                factory: factory)
        }
        refreshDurations = durations
        refreshWaiters = counter("refresh_waiters_total")
        replays = counter("replays_total")
        loopTrips = counter("refresh_loop_trips_total")
        persistenceFailures = counter("persistence_failures_total")
        evictions = counter("evictions_total")
        openSessions = Meter(label: "\(prefix)_open", dimensions: dimensions, factory: factory)
        var clientTokens: [String: Counter] = [:]
        var clientTokenDurations: [String: Timer] = [:]
        for outcome in ["issued", "adopted", "failed", "rejected"] {
            clientTokenDurations[outcome] = Timer(
                label: "\(prefix)_client_token_request_duration", dimensions: dimensions + [("outcome", outcome)],
                factory: factory)
            if outcome != "failed" {
                clientTokens[outcome] = counter("client_token_requests_total", [("outcome", outcome)])
            }
        }
        for failureClass in classes {
            clientTokens["failed.\(failureClass.rawValue)"] = counter(
                "client_token_requests_total", [("outcome", "failed"), ("failure_class", failureClass.rawValue)])
        }
        self.clientTokens = clientTokens
        self.clientTokenDurations = clientTokenDurations
        clientTokenWaiters = counter("client_token_waiters_total")
    }

    public func observe(_ event: UserSessionEvent, context: UserSessionEventContext) {
        let wasOpen = context.previousState == .opened
        let isOpen = event.session.state == .opened
        if isOpen && !wasOpen { openSessions.increment() }
        if wasOpen && !isOpen { openSessions.decrement() }
        switch event.kind {
        case .refreshLoopTripped: loopTrips.increment()
        case .persistenceFailed: persistenceFailures.increment()
        case .revocationFailed(let failureClass): revocationFailures[failureClass]?.increment()
        default: break
        }
    }

    public func observeRefresh(_ report: UserSessionRefreshReport) {
        switch report.outcome {
        case .succeeded: refreshesSucceeded.increment()
        case .discarded: refreshesDiscarded.increment()
        case .failed: refreshesFailed[report.failureClass ?? .transient]?.increment()
        }
        refreshDurations[report.outcome]?.recordNanoseconds(Self.nanoseconds(report.duration))
        if report.waiters > 0 { refreshWaiters.increment(by: report.waiters) }
    }

    public func observeReplay(_ report: UserSessionReplayReport) {
        replays.increment()
    }

    public func observeEviction(_ report: UserSessionEvictionReport) {
        evictions.increment()
    }

    public func observeClientToken(_ event: ClientTokenEvent) {
        let outcome: String
        switch event.kind {
        case .tokenIssued: outcome = "issued"
        case .tokenAdopted: outcome = "adopted"
        case .clientRejected: outcome = "rejected"
        case .requestFailed(let failureClass):
            clientTokens["failed.\(failureClass.rawValue)"]?.increment()
            outcome = "failed"
        case .persistenceFailed:
            persistenceFailures.increment()
            return
        case .forgotten, .replayed:
            if case .replayed = event.kind { replays.increment() }
            return
        }
        if outcome != "failed" { clientTokens[outcome]?.increment() }
        if let duration = event.duration {
            clientTokenDurations[outcome]?.recordNanoseconds(Self.nanoseconds(duration))
        }
        if event.waiters > 0 { clientTokenWaiters.increment(by: event.waiters) }
    }

    static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return whole.addingReportingOverflow(attoseconds / 1_000_000_000).partialValue
    }
}

extension UserSessionController.Configuration {
    /// This configuration, with `metrics` (default: a ``UserSessionMetrics`` on the bootstrapped factory) added to
    /// its observers.
    public func metrics(_ metrics: UserSessionMetrics = UserSessionMetrics()) -> Self {
        var configuration = self
        configuration.observers.append(metrics)
        return configuration
    }
}
#endif
