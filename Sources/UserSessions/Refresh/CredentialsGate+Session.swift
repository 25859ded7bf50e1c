/// Reads that are tied to one session: a replay stays with the session whose token failed, and a per-call
/// freshness request refreshes at most once.
extension CredentialsGate {
    /// Like ``accessToken()``, with the generation of the session the token belongs to (for a replay, which must
    /// stay with that session).
    nonisolated(nonsending) func accessTokenAndGeneration() async throws -> (token: String, generation: UInt64) {
        let now = clock.nowSeconds()
        // Any use of the token is activity (the registry's idle eviction reads it).
        noteDemand(now)
        let fresh = inspect { machine -> (String, UInt64)? in
            now < machine.nextActionAt ? (machine.token, machine.generation) : nil
        }
        if let fresh { return fresh }
        let slow = slowFreshAccessTokenAndGeneration(now: now)
        if let token = slow.token { return (token, slow.generation) }
        let (credentials, generation) = try await credentialsAndGeneration(for: .demand)
        return (credentials.accessToken, generation)
    }

    /// A token valid for at least `minimumValidity` seconds, refreshing through the gate (at most once) if needed.
    ///
    /// - Throws: ``UserSessionError/Code/minimumValidityUnreachable`` when the credentials' known lifetime is
    ///   shorter than asked (without refreshing), or when the token after the refresh still expires too soon; what
    ///   a forced refresh throws otherwise.
    nonisolated(nonsending) func accessToken(minimumValidity: Double) async throws -> String {
        let validity = max(0, minimumValidity)
        noteDemand(clock.nowSeconds())
        let credentials = try await credentials(for: .minimumValidity(validity))
        if let expiresAt = credentials.expiresAt,
            expiresAt.timeIntervalSinceReferenceDate - clock.nowSeconds() < validity
        {
            throw RefreshStateMachine.unreachableValidity
        }
        return credentials.accessToken
    }

    /// After an operation using `token` of the session of `generation` failed authentication: the credentials to
    /// replay with. If `token` is still current they come from a forced single-flight refresh; otherwise the
    /// current ones are returned as is. Throws ``UserSessionError/Code/sessionNotOpen`` when that session is no
    /// longer the active one, so a replay never runs with another session's credentials.
    nonisolated(nonsending) func replacementCredentials(after token: String, generation: UInt64) async throws
        -> Credentials
    {
        try await credentials(for: .replay(replacing: token, generation: generation))
    }
}
