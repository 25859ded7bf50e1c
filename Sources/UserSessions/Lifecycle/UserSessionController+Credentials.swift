extension UserSessionController {
    /// A valid access token for the open session.
    ///
    /// SKELETON: refresh to be implemented (issue 3).
    nonisolated(nonsending) public func accessToken() async throws -> String {
        if let token = gate.freshAccessToken() { return token }
        return try await gate.accessToken()
    }

    /// The current credentials, or `nil` when no session is open.
    public nonisolated var credentials: Credentials? { gate.currentCredentials() }
}
