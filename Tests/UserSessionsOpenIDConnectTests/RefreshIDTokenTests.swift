#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

/// The ID token of a refresh response (OpenID Connect Core §12.2): validated and kept, or the refresh fails with a
/// typed error and none of its tokens are used (issue 26, item 5).
@Suite(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
struct RefreshIDTokenTests {
    /// Signs alice in with the fixture's `example-app` (which gets refresh tokens); the client and her credentials.
    private func signedIn(_ provider: OpenIDProviderFixture) async throws -> (OpenIDConnectClient, Credentials) {
        var configuration = OpenIDConnectConfiguration(
            clientAuthentication: .clientSecretBasic(id: "example-app", secret: "example-secret"),
            redirectURI: try #require(URL(string: "http://127.0.0.1:8080/auth/callback")),
            scopes: ["openid", "profile", "email", "offline_access"])
        configuration.pendingSignInKeys = FleetKeys.keys
        let client = try OpenIDConnectClient(issuer: provider.issuer, configuration: configuration)
        let signIn = try await client.completeSignIn(try await provider.callback(for: client))
        let credentials = try #require(signIn.prototype.credentials)
        #expect(credentials.refreshToken != nil && credentials.idToken != nil)
        return (client, credentials)
    }

    @Test("oidcc-client-test-refresh-token") func aValidIDTokenReplacesTheStoredOne() async throws {
        try await OpenIDProviderFixture.with { provider in
            let (client, credentials) = try await signedIn(provider)
            let refresher = try await client.tokenRefresher()
            let refreshed = try await refresher.refresh(credentials)
            #expect(refreshed.accessToken != credentials.accessToken)
            let idToken = try #require(refreshed.idToken)
            #expect(idToken != credentials.idToken, "the new ID token is kept (a later id_token_hint is current)")
            // A refresh response without an ID token keeps the one stored.
            try await provider.misbehave(["refresh_id_token": "none"])
            #expect(try await refresher.refresh(refreshed).idToken == idToken)
        }
    }

    @Test("oidcc-client-test-refresh-token-invalid-sub")
    func anIDTokenOfAnotherSubjectFailsTheRefresh() async throws {
        try await expectRefreshRefused("wrong_sub", .subjectChanged)
    }

    @Test("oidcc-client-test-refresh-token-invalid-issuer")
    func anIDTokenOfAnotherIssuerFailsTheRefresh() async throws {
        try await expectRefreshRefused("wrong_iss", .issuerMismatch)
    }

    @Test(arguments: [
        ("wrong_aud", OpenIDConnectError.Code.audienceMismatch), ("bad_signature", .signatureInvalid),
        ("expired", .tokenExpired),
    ])
    func anIDTokenThatFailsAnotherCheckFailsTheRefresh(fault: String, code: OpenIDConnectError.Code) async throws {
        try await expectRefreshRefused(fault, code)
    }

    /// Makes the provider's next refresh response carry an ID token with `fault`; expects the refresh to fail with
    /// `code` underneath, terminally.
    private func expectRefreshRefused(
        _ fault: String, _ code: OpenIDConnectError.Code, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        try await OpenIDProviderFixture.with { provider in
            let (client, credentials) = try await signedIn(provider)
            try await provider.misbehave(["refresh_id_token": fault])
            let refresher = try await client.tokenRefresher()
            do {
                let refreshed = try await refresher.refresh(credentials)
                Issue.record("the refresh was accepted: \(refreshed)", sourceLocation: sourceLocation)
            } catch let error as UserSessionError {
                #expect(error.code == .refreshFailed, sourceLocation: sourceLocation)
                #expect(error.failureClass == .terminal, sourceLocation: sourceLocation)
                #expect(
                    (error.underlying as? OpenIDConnectError)?.code == code, "\(error)", sourceLocation: sourceLocation)
            }
        }
    }

    @Test func aRegistryWithTheRefresherNeverStoresTheRefusedTokens() async throws {
        try await OpenIDProviderFixture.with { provider in
            let (client, credentials) = try await signedIn(provider)
            let directory = FileManager.default.temporaryDirectory.appending(path: "oidc-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            let registry = UserSessionRegistry(
                store: FileTokenStore(directory: directory), refresher: try await client.tokenRefresher())
            var expired = credentials
            expired.expiresAt = Date(timeIntervalSinceNow: -60)
            let controller = try await registry.open(
                UserSessionPrototype(identifier: "alice", userInfo: UserInfo(id: "248289761001"), credentials: expired))
            try await provider.misbehave(["refresh_id_token": "wrong_sub"])
            await #expect(throws: UserSessionError.self) { _ = try await controller.accessToken() }
            let stored = try await registry.store.load(identifier: "alice")?.credentials
            #expect(stored == nil || stored?.accessToken == credentials.accessToken, "the refused tokens were not used")
            await registry.shutdown()
        }
    }
}
#endif
