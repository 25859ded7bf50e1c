/// How a refresh failed, which decides what happens to the session.
public enum RefreshFailureClass: String, Sendable, Hashable, Codable, CustomStringConvertible {
    /// The refresh token is no longer valid (`invalid_grant`): the session becomes ``UserSession/State/invalid``.
    case terminal
    /// The client is misconfigured (`invalid_client`, `unauthorized_client`, `unsupported_grant_type`,
    /// `invalid_scope`, `invalid_request`): reported; the session stays open and no proactive refresh starts again
    /// until the credentials change. A caller whose token has expired gets the error until the backoff elapses
    /// (``UserSessionController/Configuration/initialRetryDelay``, doubling), then the next such call sends the
    /// refresh once more, for every caller waiting.
    case misconfiguration
    /// A passing failure (network, timeout, 408, 429, 5xx, unreadable body): the session stays open and a later
    /// call retries.
    case transient
    /// The refresh was cancelled. Cancellation never ends a session.
    case cancelled

    public var description: String { rawValue }
}
