/// Revokes credentials at the authorization server (RFC 7009) before a sign-out removes them locally, within
/// ``UserSessionController/Configuration/revocationTimeout``.
///
/// Shared by ``UserSessionController/closeAndClear()`` and, for a user without a controller,
/// ``UserSessionRegistry/closeAndClear(identifier:)``. It never throws and never changes local state: whatever
/// happens, the caller removes the credentials afterwards.
enum SignOutRevocation {
    /// Why a revocation did not succeed: the event's failure class and its detail (never a secret).
    struct Failure: Sendable, Hashable {
        var failureClass: RefreshFailureClass
        var detail: String
    }

    /// Whether a sign-out with `configuration` and `refresher` revokes anything at all.
    static func isEnabled(_ configuration: UserSessionController.Configuration, _ refresher: (any TokenRefresher)?)
        -> Bool
    {
        configuration.revokesOnSignOut && refresher?.canRevoke == true
    }

    /// Revokes `credentials`, or, when `nil`, the credentials stored under `identifier` (a record that cannot be
    /// loaded, or holds none, means nothing to revoke), and returns the failure to report, or `nil`.
    ///
    /// `newest` are the identifier's newest credentials the process knows (``CredentialsLedger/newest(_:)``), when
    /// they are another version: a rotation the store has not taken yet, or one a session's copy has not caught up
    /// with. They are revoked first. The older ones may be spent already, and a server may ignore the revocation of
    /// a spent refresh token (RFC 7009 §2.2), which would leave the grant alive with the newest tokens.
    ///
    /// The work runs in a task of its own, awaited for at most the configuration's `revocationTimeout` as timed by
    /// its clock; a revocation that overruns it is cancelled and left behind, reported as transient. Cancelling
    /// the caller cancels the revocation (reported as cancelled) rather than delaying the sign-out.
    static func run(
        refresher: (any TokenRefresher)?,
        credentials: Credentials?,
        newest: Credentials? = nil,
        identifier: String,
        store: any TokenStore,
        configuration: UserSessionController.Configuration
    ) async -> Failure? {
        guard isEnabled(configuration, refresher), let refresher else { return nil }
        let work = Task<Failure?, Never> {
            let held: Credentials?
            if let credentials {
                held = credentials
            } else {
                held = try? await store.load(identifier: identifier)?.credentials
            }
            var targets: [Credentials] = []
            if let newest { targets.append(newest) }
            if let held, !targets.contains(where: { $0.isSameVersion(as: held) }) { targets.append(held) }
            var firstFailure: Failure?
            for target in targets {
                do {
                    try await configuration.instrumentation.measure(.revocation) { try await refresher.revoke(target) }
                } catch {
                    firstFailure =
                        firstFailure ?? failure(error, secrets: [target.accessToken, target.refreshToken ?? ""])
                }
            }
            return firstFailure
        }
        let (clock, timeout) = (configuration.clock, configuration.revocationTimeout)
        let deadlineClock = DeadlineClock { duration in
            try await clock.sleep(until: clock.nowSeconds() + duration.seconds)
        }
        let inTime = await withTaskCancellationHandler {
            await Deadline.wait(for: work, timeout: timeout, clock: deadlineClock)
        } onCancel: {
            work.cancel()
        }
        if inTime { return await work.value }
        work.cancel()
        return Failure(
            failureClass: .transient,
            detail: "the revocation got no answer within \(timeout); signed out locally without waiting for it")
    }

    /// The failure class and a description of `error` that cannot carry a secret: `secrets` (the revoked tokens)
    /// are redacted from it.
    static func failure(_ error: any Error, secrets: [String]) -> Failure {
        if let error = error as? UserSessionError {
            // Package errors never contain secrets; a refresher's own should not either. Only the message is kept
            // (not the underlying error), with the tokens redacted in case a refresher put them there.
            let message = OAuth2TokenResponse.sanitize(error.message, secrets: secrets, limit: 300)
            return Failure(failureClass: error.failureClass ?? .transient, detail: "revocation failed: \(message)")
        }
        if error is CancellationError {
            return Failure(failureClass: .cancelled, detail: "the revocation was cancelled")
        }
        // Other errors may print secrets; only their type is described.
        return Failure(
            failureClass: .transient, detail: "the refresher's revoke threw \(String(describing: type(of: error)))")
    }
}
