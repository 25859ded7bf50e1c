import Foundation
import Testing

@testable import UserSessions

/// `OAuth2TokenRefresher.revoke(_:)` (RFC 7009) against the fixture server's revocation endpoint.
struct OAuth2RevocationTests {
    static let secret = "client-secret"

    static func refresher(
        _ server: OAuthFixtureServer, _ authentication: OAuth2TokenRefresher.ClientAuthentication? = nil,
        revocation: Bool = true
    ) throws -> OAuth2TokenRefresher {
        try OAuth2TokenRefresher(
            tokenEndpoint: server.tokenEndpoint, revocationEndpoint: revocation ? server.revocationEndpoint : nil,
            clientAuthentication: authentication ?? .clientSecretBasic(id: "client", secret: secret))
    }

    static func revokeError(_ body: () async throws -> Void) async -> UserSessionError? {
        await ExpectedFailure.error(of: "revocation", body)
    }

    @Test func revokingTheRefreshTokenRevokesItsWholeFamily() async throws {
        try await OAuthFixtureServer.with { server in
            let refresher = try Self.refresher(server)
            let (refreshToken, accessToken) = try await server.issue()
            let refreshed = try await refresher.refresh(OAuth2TokenRefresherTests.credentials(refreshToken))
            let current = try #require(refreshed.refreshToken)
            #expect(try await server.isActive(current))
            try await refresher.revoke(refreshed)
            let stats = try await server.stats()
            #expect(stats.revocations == 1)
            #expect(stats.lastTokenTypeHint == "refresh_token")
            #expect(stats.lastAuth == "basic" || stats.lastAuth == nil)
            #expect(try await server.isActive(current) == false)
            #expect(try await server.isActive(refreshed.accessToken) == false)
            #expect(try await server.isActive(accessToken) == false)
            let error = await OAuth2TokenRefresherTests.refreshError { try await refresher.refresh(refreshed) }
            #expect(error?.failureClass == .terminal)
        }
    }

    @Test func withoutARefreshTokenTheAccessTokenIsRevoked() async throws {
        try await OAuthFixtureServer.with(["--auth", "post"]) { server in
            let refresher = try Self.refresher(server, .clientSecretPost(id: "client", secret: Self.secret))
            let (refreshToken, accessToken) = try await server.issue()
            try await refresher.revoke(Credentials(accessToken: accessToken))
            let stats = try await server.stats()
            #expect(stats.revocations == 1)
            #expect(stats.lastTokenTypeHint == "access_token")
            #expect(try await server.isActive(accessToken) == false)
            // Only that access token: the refresh token of its family still works.
            #expect(try await server.isActive(refreshToken))
        }
    }

    @Test func unknownAndAlreadyRevokedTokensAreNotAnError() async throws {
        try await OAuthFixtureServer.with(["--auth", "none"]) { server in
            let refresher = try Self.refresher(server, .publicClient(id: "client"))
            let credentials = Credentials(accessToken: "at-unknown", refreshToken: "rt-unknown")
            try await refresher.revoke(credentials)
            try await refresher.revoke(credentials)
            #expect(try await server.stats().revocations == 2)
        }
    }

    @Test func withoutARevocationEndpointNothingIsSent() async throws {
        try await OAuthFixtureServer.with { server in
            let (refreshToken, _) = try await server.issue()
            try await Self.refresher(server, revocation: false).revoke(
                Credentials(accessToken: "a", refreshToken: refreshToken))
            // A refresher that cannot revoke inherits the protocol's default, which does nothing either.
            let scripted: any TokenRefresher = ScriptedRefresher()
            try await scripted.revoke(Credentials(accessToken: "a", refreshToken: refreshToken))
            #expect(try await server.stats().revocations == 0)
            #expect(try await server.isActive(refreshToken))
        }
    }

    @Test(arguments: ExpectedFailure.fixtureAnswers)
    func failuresAreClassifiedAsForRefreshes(settings: [String: any Sendable], expected: RefreshFailureClass)
        async throws
    {
        try await OAuthFixtureServer.with { server in
            try await server.configure(settings)
            let refresher = try Self.refresher(server)
            let (refreshToken, accessToken) = try await server.issue()
            let credentials = Credentials(accessToken: accessToken, refreshToken: refreshToken)
            let error = await Self.revokeError { try await refresher.revoke(credentials) }
            #expect(error?.code == .revocationFailed)
            #expect(error?.failureClass == expected)
            #expect(try await server.stats().redirectTargetHits == 0)
            let rendered = error.map { "\($0) \(String(reflecting: $0))" } ?? ""
            for secret in [refreshToken, accessToken, Self.secret] { #expect(!rendered.contains(secret)) }
        }
    }

    @Test func aWrongClientSecretIsMisconfigurationAndRevokesNothing() async throws {
        try await OAuthFixtureServer.with { server in
            let refresher = try Self.refresher(server, .clientSecretBasic(id: "client", secret: "wrong-secret"))
            let (refreshToken, _) = try await server.issue()
            let error = await Self.revokeError {
                try await refresher.revoke(Credentials(accessToken: "at-unused", refreshToken: refreshToken))
            }
            #expect(error?.failureClass == .misconfiguration)
            #expect(error?.message.contains("invalid_client") == true)
            #expect(try await server.isActive(refreshToken))
        }
    }

    @Test func aHugeAnswerIsCutOffAndTransient() async throws {
        try await OAuthFixtureServer.with { server in
            try await server.configure(["mode": "huge"])
            let error = await Self.revokeError {
                try await Self.refresher(server).revoke(Credentials(accessToken: "a", refreshToken: "rt-x"))
            }
            #expect(error?.code == .revocationFailed)
            #expect(error?.failureClass == .transient)
        }
    }

    @Test func anInsecureRevocationEndpointIsRefused() throws {
        let token = try #require(URL(string: "https://auth.example.com/token"))
        let revocation = try #require(URL(string: "http://auth.example.com/revoke"))
        let error = #expect(throws: UserSessionError.self) {
            try OAuth2TokenRefresher(
                tokenEndpoint: token, revocationEndpoint: revocation, clientAuthentication: .publicClient(id: "c"))
        }
        #expect(error?.code == .insecureEndpoint)
    }
}
