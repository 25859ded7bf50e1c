import Foundation

extension RefreshStateMachine {
    /// Makes `credentials` current (the caller tells ``persistence`` whether they are stored). Their lifetime counts from their ``Credentials/lastRefreshedAt``, or else
    /// from `issuedAt` (when a refresh started); without either it is unknown.
    mutating func setCredentials(_ credentials: Credentials?, issuedAt: Double? = nil) {
        self.credentials = credentials
        token = credentials?.accessToken ?? ""
        expiresAt = credentials?.expiresAt?.timeIntervalSinceReferenceDate ?? .infinity
        let issued = credentials?.lastRefreshedAt?.timeIntervalSinceReferenceDate ?? issuedAt
        lifetime = expiresAt.isFinite ? issued.map { expiresAt - $0 } : nil
        applyLifetime()
    }

    /// Scales the lead time, the soft window and the loop-breaker window to the credentials' lifetime.
    ///
    /// A 300-s token inside a 300-s soft window would start a refresh at its first use, and every refresh the
    /// next one, until the loop breaker trips. So for a known lifetime `L` the lead time is at most `L / 10`, the
    /// soft window at most `L / 4` (a token is refreshed once, when about three quarters of its life have passed),
    /// and the breaker's window at most `max(L, 1 s)` (one refresh per lifetime is never a loop). Long-lived tokens
    /// keep the configured values; credentials of unknown lifetime use them too.
    mutating func applyLifetime() {
        guard let lifetime else {
            (leadTime, softWindow, loopWindow) = (policy.leadTime, policy.softWindow, policy.loopWindow)
            return
        }
        let span = max(0, lifetime)
        leadTime = min(policy.leadTime, span * Policy.leadFraction)
        softWindow = max(leadTime, min(policy.softWindow, span * Policy.softWindowFraction))
        loopWindow = min(policy.loopWindow, max(span, Policy.minimumLoopWindow))
    }

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
