import Foundation

/// The session's own data in ``RefreshStateMachine``: which session it serves, its credentials and what derives from
/// them, the loop breaker's memory and the stored record it is based on. Each is a value of its own, replaced or
/// changed through one `mutating func`, so the machine has no loose fields to keep in step.
extension RefreshStateMachine {
    /// Who a session is: its generation (one per open or restore), identifier and user info.
    struct Identity {
        let generation: UInt64
        let identifier: String
        let userInfo: UserInfo
    }

    /// Which session the machine serves.
    ///
    /// ```
    /// none ──activate──▶ active ──deactivate──▶ ended ──activate──▶ active
    /// ```
    enum Phase {
        /// No session was activated yet.
        case none
        /// Tokens are served to this session.
        case active(Identity)
        /// This session ended: nothing is served; its credentials stay until the final flush has written them.
        case ended(Identity)

        var identity: Identity? {
            switch self {
            case .none: nil
            case .active(let identity), .ended(let identity): identity
            }
        }
    }

    /// The current credentials with everything the machine derives from them, computed once when they change.
    struct Held {
        let credentials: Credentials?
        /// A copy of `credentials?.accessToken` for the hot path (empty without credentials).
        let token: String
        /// When they expire, in seconds since the reference date (`infinity` when unknown).
        let expiresAt: Double
        /// Expiry minus issue time, when both are known.
        let lifetime: Double?
        /// The lead time, soft window and loop-breaker window for these credentials: the policy's, scaled down to
        /// the lifetime when it is known.
        let leadTime: Double
        let softWindow: Double
        let loopWindow: Double

        /// Derives everything from `credentials`, whose lifetime counts from their ``Credentials/lastRefreshedAt``,
        /// or else from `issuedAt` (when the refresh that returned them started); without either it is unknown.
        ///
        /// A 300-s token inside a 300-s soft window would start a refresh at its first use, and every refresh the
        /// next one, until the loop breaker trips. So for a known lifetime `L` the lead time is at most `L / 10`,
        /// the soft window at most `L / 4` (a token is refreshed once, when about three quarters of its life have
        /// passed), and the breaker's window at most `max(L, 1 s)` (one refresh per lifetime is never a loop).
        /// Long-lived tokens keep the configured values; credentials of unknown lifetime use them too.
        init(_ credentials: Credentials?, issuedAt: Double? = nil, policy: Policy) {
            self.credentials = credentials
            token = credentials?.accessToken ?? ""
            let expiry = credentials?.expiresAt?.timeIntervalSinceReferenceDate ?? .infinity
            expiresAt = expiry
            let issued = credentials?.lastRefreshedAt?.timeIntervalSinceReferenceDate ?? issuedAt
            let lifetime = expiry.isFinite ? issued.map { expiry - $0 } : nil
            self.lifetime = lifetime
            guard let lifetime else {
                (leadTime, softWindow, loopWindow) = (policy.leadTime, policy.softWindow, policy.loopWindow)
                return
            }
            let span = max(0, lifetime)
            let lead = min(policy.leadTime, span * Policy.leadFraction)
            leadTime = lead
            softWindow = max(lead, min(policy.softWindow, span * Policy.softWindowFraction))
            loopWindow = min(policy.loopWindow, max(span, Policy.minimumLoopWindow))
        }
    }

    /// The refresh-loop breaker's memory: when the last successful refreshes happened, oldest first.
    struct LoopBreaker {
        private var successTimes: [Double] = []

        mutating func recordSuccess(at now: Double) {
            successTimes.append(now)
        }

        /// Whether fewer than `maximum` refreshes succeeded within `window` before `now`; forgets older ones.
        mutating func allows(now: Double, window: Double, maximum: Int) -> Bool {
            let horizon = now - window
            if let first = successTimes.first, first <= horizon { successTimes.removeAll { $0 <= horizon } }
            return successTimes.count < maximum
        }

        /// When the next refresh is allowed, or `-infinity` if it is now.
        func freeAt(window: Double, maximum: Int) -> Double {
            guard successTimes.count >= maximum else { return -.infinity }
            return successTimes[successTimes.count - maximum] + window
        }
    }

    /// For a ``CoordinatedTokenStore``: the stored record the active session's credentials were read from or last
    /// written as.
    struct StoredBase {
        /// Its revision; `nil` when unknown (a store without coordination).
        var revision: UInt64?
        /// Its refresh token, as far as this session knows: a conflicting write finding it still stored may write
        /// over that record, since it holds nothing newer.
        var refreshToken: String?
    }

    // MARK: - Reading the session's data

    var active: Bool {
        if case .active = phase { return true }
        return false
    }
    var generation: UInt64 { phase.identity?.generation ?? 0 }
    var identifier: String { phase.identity?.identifier ?? "" }
    var userInfo: UserInfo { phase.identity?.userInfo ?? UserInfo(id: "") }
    var credentials: Credentials? { held.credentials }
    var token: String { held.token }
    var expiresAt: Double { held.expiresAt }
    var lifetime: Double? { held.lifetime }
    var leadTime: Double { held.leadTime }
    var softWindow: Double { held.softWindow }
    var loopWindow: Double { held.loopWindow }
    var heldRevision: UInt64? { base.revision }

    /// Makes `credentials` current (the caller tells ``persistence`` whether they are stored).
    mutating func setCredentials(_ credentials: Credentials?, issuedAt: Double? = nil) {
        held = Held(credentials, issuedAt: issuedAt, policy: policy)
    }
}
