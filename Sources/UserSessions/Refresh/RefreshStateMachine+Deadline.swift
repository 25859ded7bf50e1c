import Foundation

extension RefreshStateMachine {
    /// The capped exponential backoff with "equal jitter"; see ``Policy/backoff(attempt:jitter:)``.
    func backoff(attempt: Int, jitter: Double) -> Double {
        policy.backoff(attempt: attempt, jitter: jitter)
    }

    /// Recomputes ``nextActionAt`` from everything that can require action.
    mutating func recomputeDeadline() {
        guard active, !isTerminated, hasCredentials else {
            nextActionAt = -.infinity
            return
        }
        var deadline = Double.infinity
        if expiresAt.isFinite {
            let leadStart = expiresAt - leadTime
            if flights.isRefreshing {
                deadline = leadStart
            } else if hasRefresher, credentials?.isRefreshable == true, !flights.blocksAutomaticRefresh {
                let softStart = expiresAt - softWindow
                deadline = min(max(softStart, flights.retryAt, breakerFreeAt), expiresAt)
            } else {
                deadline = expiresAt
            }
        }
        if let retryAt = persistence.pendingRetryAt { deadline = min(deadline, retryAt) }
        nextActionAt = deadline
    }
}

extension RefreshStateMachine.Policy {
    /// The capped exponential backoff with "equal jitter": half the delay fixed, half random.
    func backoff(attempt: Int, jitter: Double) -> Double {
        let exponent = Double(min(max(attempt - 1, 0), 62))
        let delay = min(maximumRetryDelay, initialRetryDelay * pow(2, exponent))
        return delay / 2 + delay / 2 * min(max(jitter, 0), 1)
    }
}
