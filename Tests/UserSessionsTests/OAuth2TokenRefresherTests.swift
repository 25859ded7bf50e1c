import Foundation
import Testing

@testable import UserSessions

/// `OAuth2TokenRefresher` against a real token endpoint on 127.0.0.1 (Fixtures/oauth_server.py). Client
/// authentication, failure classes, redirects, timeouts, the body limit and cancellation are in the shared transport
/// suite (`TransportCheck`, run by `URLSessionTransportTests` and, with its trait, for AsyncHTTPClient).
struct OAuth2TokenRefresherTests {
    static let secret = "client-secret"

    static func refresher(
        _ server: OAuthFixtureServer, _ authentication: OAuth2TokenRefresher.ClientAuthentication? = nil,
        scope: Set<String>? = nil, clock: SessionClock = .system, timeout: Duration = .seconds(30)
    ) throws -> OAuth2TokenRefresher {
        try OAuth2TokenRefresher(
            tokenEndpoint: server.tokenEndpoint,
            clientAuthentication: authentication ?? .clientSecretBasic(id: "client", secret: secret),
            scope: scope, requestTimeout: timeout, clock: clock)
    }

    static func credentials(_ refreshToken: String, granted: Set<String> = ["read"]) -> Credentials {
        Credentials(
            accessToken: "at-old", refreshToken: refreshToken, tokenType: "Bearer", expiresAt: Date(),
            grantedPermissions: granted, declinedPermissions: ["admin"])
    }

    static func refreshError(_ body: () async throws -> Credentials) async -> UserSessionError? {
        await ExpectedFailure.error(of: "refresh", body)
    }

    @Test func basicAuthenticationRefreshRotatesAndComputesExpiryFromSendTime() async throws {
        try await OAuthFixtureServer.with { server in
            let time = ManualTime()
            let refresher = try Self.refresher(server, clock: time.clock)
            let (refreshToken, _) = try await server.issue()
            let refreshed = try await refresher.refresh(Self.credentials(refreshToken))
            #expect(refreshed.accessToken.hasPrefix("at-"))
            #expect(refreshed.refreshToken != refreshToken)
            #expect(refreshed.refreshToken?.hasPrefix("rt-") == true)
            #expect(refreshed.expiresAt == time.now.addingTimeInterval(3600))
            #expect(refreshed.lastRefreshedAt == time.now)
            #expect(refreshed.source == .refresh)
            #expect(refreshed.grantedPermissions == ["read"])
            #expect(refreshed.declinedPermissions == ["admin"])
            let stats = try await server.stats()
            #expect(stats.lastAuth == "basic")
            #expect(stats.refreshes == 1)
        }
    }

    @Test func basicAuthenticationFormEncodesIdAndSecret() async throws {
        let id = "my client:1&x=y"
        let secret = "s€cr:t+%/ 2"
        try await OAuthFixtureServer.with(["--client-id", id, "--client-secret", secret]) { server in
            let refresher = try Self.refresher(server, .clientSecretBasic(id: id, secret: secret))
            let (refreshToken, _) = try await server.issue()
            _ = try await refresher.refresh(Self.credentials(refreshToken))
            #expect(try await server.stats().refreshes == 1)
        }
    }

    @Test func missingRefreshTokenKeepsTheOldOneAndStringLifetimesAreAccepted() async throws {
        try await OAuthFixtureServer.with { server in
            try await server.configure(["omit_refresh_token": true, "expires_in": "120"])
            let time = ManualTime()
            let refresher = try Self.refresher(server, clock: time.clock)
            let (refreshToken, _) = try await server.issue()
            let refreshed = try await refresher.refresh(Self.credentials(refreshToken))
            #expect(refreshed.refreshToken == refreshToken)
            #expect(refreshed.expiresAt == time.now.addingTimeInterval(120))
        }
    }

    @Test func plainHTTPIsRefusedExceptOnLoopback() throws {
        let authentication = OAuth2TokenRefresher.ClientAuthentication.publicClient(id: "c")
        for endpoint in ["http://example.com/token", "ftp://127.0.0.1/token", "http://127.0.0.1.example.com/t"] {
            #expect(throws: UserSessionError(.insecureEndpoint, "")) {
                try OAuth2TokenRefresher(
                    tokenEndpoint: try #require(URL(string: endpoint)), clientAuthentication: authentication)
            }
        }
        for endpoint in [
            "https://example.com/token", "http://127.0.0.1:8080/token", "http://localhost/t", "http://[::1]/t",
        ] {
            #expect(throws: Never.self) {
                try OAuth2TokenRefresher(
                    tokenEndpoint: try #require(URL(string: endpoint)), clientAuthentication: authentication)
            }
        }
    }

    @Test func malformedSuccessBodiesAreTransient() {
        let previous = Self.credentials("rt")
        for body in [
            #"{"token_type": "Bearer"}"#, #"{"access_token": 5}"#, #"{"access_token": "a", "expires_in": -1}"#,
            #"{"access_token": "a", "expires_in": "soon"}"#, "[]", "",
        ] {
            #expect(throws: UserSessionError(.malformedTokenResponse, "")) {
                try OAuth2TokenResponse.credentials(
                    status: 200, body: Data(body.utf8), previous: previous, sentAt: Date(), secrets: [])
            }
        }
    }

    @Test func secretsNeverAppearInErrorsOrDescriptions() async throws {
        try await OAuthFixtureServer.with { server in
            let refresher = try Self.refresher(server)
            let (refreshToken, accessToken) = try await server.issue()
            let refreshed = try await refresher.refresh(Self.credentials(refreshToken))
            var errors: [UserSessionError] = []
            if let reuse = await Self.refreshError({ try await refresher.refresh(Self.credentials(refreshToken)) }) {
                errors.append(reuse)
            }
            for settings: [String: Any] in [["mode": "error500"], ["mode": "garbage"], ["mode": "invalid_client"]] {
                try await server.configure(settings)
                if let error = await Self.refreshError({ try await refresher.refresh(Self.credentials(refreshToken)) })
                {
                    errors.append(error)
                }
            }
            #expect(errors.count == 4)
            var renderings = errors.flatMap { error -> [String] in
                var dumped = ""
                dump(error, to: &dumped)
                return ["\(error)", String(reflecting: error), error.message, dumped]
            }
            var dumpedRefresher = ""
            dump(refresher, to: &dumpedRefresher)
            renderings += ["\(refresher)", String(reflecting: refresher), dumpedRefresher]
            renderings += ["\(refresher.clientAuthentication)", String(reflecting: refresher.clientAuthentication)]
            let secrets = [Self.secret, refreshToken, accessToken, refreshed.accessToken, refreshed.refreshToken ?? ""]
            for rendering in renderings {
                for secret in secrets { #expect(!rendering.contains(secret), "\(rendering)") }
            }
        }
    }
}
