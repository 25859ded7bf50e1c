extension UserSessionController {
    /// A valid access token for the open session, refreshing it first when it is about to expire.
    ///
    /// This is the hot path of every request: while the token is fresh it is returned after one clock read and
    /// one short lock, without hopping onto the controller's executor and without suspending.
    ///
    /// - Inside the proactive window (``Configuration/proactiveRefreshWindow``) the still-valid token is returned
    ///   at once and one refresh starts in the background; callers never see its outcome.
    /// - Inside the lead time (``Configuration/refreshLeadTime``) or after expiry, callers wait for a single-flight
    ///   refresh: however many call at once, the refresher runs once and all of them get its result. A caller that
    ///   waited for a refresh that failed gets that failure, even if the old token had a few seconds left. After a
    ///   failed refresh, a token that is still valid is served again until the retry backoff elapses.
    ///
    /// - Important: Cancelling the calling task makes this call throw `CancellationError` at once; the refresh it
    ///   was waiting for keeps running and its result is committed, so a rotated refresh token is never lost.
    /// - Throws: ``UserSessionError`` with code ``UserSessionError/Code/sessionNotOpen`` when no session is open;
    ///   ``UserSessionError/Code/refreshFailed`` (see ``UserSessionError/failureClass``) when the refresh this call
    ///   waited for failed; ``UserSessionError/Code/noRefresher`` when the token expired and cannot be refreshed;
    ///   ``UserSessionError/Code/refreshLoop`` when the refresh-loop breaker refused a needed refresh;
    ///   `CancellationError` when the calling task was cancelled.
    nonisolated(nonsending) public func accessToken() async throws -> String {
        if let token = gate.freshAccessToken() { return token }
        return try await gate.waitForAccessToken()
    }

    /// Runs `operation` with a valid access token, and replays it once if it fails authentication.
    ///
    /// If `operation` throws an error for which `isAuthenticationFailure` returns `true` (for example an HTTP 401):
    /// - if the token it used is still the current one, the credentials are refreshed once (a forced refresh
    ///   through the same single-flight gate, so concurrent replays share one refresh) and `operation` runs again
    ///   with the new token;
    /// - if the token had already been replaced meanwhile, `operation` runs again with the current token without
    ///   a refresh.
    ///
    /// A second authentication failure is thrown to the caller, as is any error that is not an authentication
    /// failure (untouched, on the first attempt). Both closures run in the caller's isolation and are not
    /// retained after this call returns.
    ///
    /// - Important: A replay belongs to the session whose token the first attempt used. If that session was
    ///   closed, replaced (another ``open(_:)``) or invalidated meanwhile, the authentication failure is not
    ///   replayed: this throws ``UserSessionError/Code/sessionNotOpen``, so an operation never runs with another
    ///   user's credentials.
    ///
    /// - Throws: what ``accessToken()`` throws; what `operation` throws; when the refresh needed for the replay
    ///   fails, that refresh's error (``UserSessionError/Code/refreshFailed``, or
    ///   ``UserSessionError/Code/refreshLoop`` when refreshes keep failing to help);
    ///   ``UserSessionError/Code/sessionNotOpen`` when the session of the first attempt ended before the replay.
    nonisolated(nonsending) public func withAccessToken<R>(
        isAuthenticationFailure: (any Error) -> Bool,
        _ operation: (String) async throws -> R
    ) async throws -> R {
        let (token, generation) = try await gate.accessTokenAndGeneration()
        do {
            return try await operation(token)
        } catch {
            guard isAuthenticationFailure(error) else { throw error }
            let replacement = try await gate.replacementCredentials(after: token, generation: generation)
            let replay = UserSessionReplayReport(identifier: hub.session.identifier)
            hub.observers.notify { $0.observeReplay(replay) }
            return try await operation(replacement.accessToken)
        }
    }

    /// A valid access token that stays valid for at least `minimumValidity`, refreshing first (through the same
    /// single-flight gate as ``accessToken()``) when the current one expires sooner.
    ///
    /// Use it before work that outlives a request, such as a long upload. A token that does not expire always
    /// qualifies; a negative `minimumValidity` counts as zero.
    ///
    /// - Important: This refreshes at most once per call and never loops. When the token's lifetime is known
    ///   (from ``Credentials/lastRefreshedAt``, or its refresh) and is shorter than `minimumValidity`, it throws
    ///   ``UserSessionError/Code/minimumValidityUnreachable`` without refreshing, since a new token would live no
    ///   longer; when the lifetime is unknown, it refreshes once and throws the same error if the new token still
    ///   expires too soon (the new token is kept and served to other callers).
    /// - Throws: ``UserSessionError/Code/minimumValidityUnreachable`` as above; otherwise what
    ///   ``refreshCredentials()`` throws (``UserSessionError/Code/sessionNotOpen``,
    ///   ``UserSessionError/Code/noRefresher``, ``UserSessionError/Code/refreshLoop``,
    ///   ``UserSessionError/Code/refreshFailed``), and `CancellationError` when the calling task is cancelled
    ///   while waiting (the refresh goes on and is committed).
    nonisolated(nonsending) public func accessToken(minimumValidity: Duration) async throws -> String {
        try await gate.accessToken(minimumValidity: minimumValidity.seconds)
    }

    /// Refreshes the credentials now, through the single-flight gate, and returns the new ones.
    ///
    /// If a refresh is already in flight, this call joins it instead of starting another. The new credentials
    /// are persisted, published and announced with ``UserSessionEvent/Kind/credentialsRefreshed`` before this
    /// returns.
    ///
    /// - Important: Cancelling the calling task throws `CancellationError` at once; the refresh continues and is
    ///   committed.
    /// - Throws: ``UserSessionError/Code/sessionNotOpen``; ``UserSessionError/Code/noRefresher`` when there is no
    ///   refresher or no refresh token; ``UserSessionError/Code/refreshLoop`` when the refresh-loop breaker
    ///   tripped; the refresh's error (``UserSessionError/Code/refreshFailed`` with its failure class).
    @discardableResult
    nonisolated(nonsending) public func refreshCredentials() async throws -> Credentials {
        try await gate.refresh()
    }

    /// Replaces the session's credentials with ones obtained elsewhere (for example after re-authorizing with
    /// more permissions).
    ///
    /// The credentials are written to the ``store`` first, then handed out to readers, then announced with
    /// ``UserSessionEvent/Kind/credentialsUpdated(_:)`` saying whether the token was extended and which
    /// permissions were added or removed. A refresh in flight is superseded: its result is discarded and its
    /// waiters get these credentials.
    ///
    /// If the session ends while the write is in progress, the write stands (the credentials went to that
    /// session's own record) and this returns normally, without publishing them or emitting an event.
    ///
    /// - Throws: ``UserSessionError/Code/sessionNotOpen`` when no session is open (nothing is written); the store's
    ///   error when writing fails, in which case nothing changes.
    nonisolated(nonsending) public func updateCredentials(_ credentials: Credentials) async throws {
        try await gate.update(credentials)
    }

    /// The current credentials, or `nil` when no session is open.
    public nonisolated var credentials: Credentials? { gate.currentCredentials() }
}
