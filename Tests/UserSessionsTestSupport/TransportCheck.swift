import Foundation
import UserSessions

/// The transport suite every ``HTTPTransport`` the package ships must pass: ``OAuth2TokenRefresher`` over the
/// transport against the OAuth fixture on 127.0.0.1 (`Fixtures/oauth_server.py`), plus the transport's own answers.
/// Same classification, same 1 MiB cap, redirects refused, same timeouts, whichever transport.
///
/// Each test target runs every case for its transports:
/// `@Test(arguments: TransportCheck.allCases) func suite(_ check: TransportCheck) async throws`.
package enum TransportCheck: String, CaseIterable, Sendable, CustomStringConvertible {
    case basicAuthenticationRefreshRotatesTheRefreshToken
    case postAuthenticationSendsTheSecretInTheBody
    case publicClientSendsOnlyItsIdAndTheScope
    case answersAreMappedOntoFailureClasses
    case reusedRefreshTokenIsTerminalAndTheErrorDoesNotEchoIt
    case redirectsAreReturnedByTheTransportAndNeverFollowed
    case refusedConnectionIsTransient
    case slowAnswersTimeOutInTheTransportAndTheRefresher
    case bodiesUpToOneMiBAreReadAndLongerOnesAreCutOff
    case cancellingTheCallerCancelsTheRequest

    package static let clientSecret = "client-secret"
    package static let limit = 1024 * 1024

    package var description: String { rawValue }

    /// Runs the check with a new transport from `transport`.
    package func run(on transport: TransportUnderTest) async throws {
        try await transport.with { transport in try await run(with: transport) }
    }

    private func run(with transport: any HTTPTransport) async throws {
        switch self {
        case .basicAuthenticationRefreshRotatesTheRefreshToken: try await basicAuthentication(transport)
        case .postAuthenticationSendsTheSecretInTheBody: try await postAuthentication(transport)
        case .publicClientSendsOnlyItsIdAndTheScope: try await publicClient(transport)
        case .answersAreMappedOntoFailureClasses: try await failureClasses(transport)
        case .reusedRefreshTokenIsTerminalAndTheErrorDoesNotEchoIt: try await reuse(transport)
        case .redirectsAreReturnedByTheTransportAndNeverFollowed: try await redirects(transport)
        case .refusedConnectionIsTransient: try await refusedConnection(transport)
        case .slowAnswersTimeOutInTheTransportAndTheRefresher: try await timeouts(transport)
        case .bodiesUpToOneMiBAreReadAndLongerOnesAreCutOff: try await bodyLimit(transport)
        case .cancellingTheCallerCancelsTheRequest: try await cancellation(transport)
        }
    }

    // MARK: Helpers

    package static func refresher(
        _ server: OAuthFixtureServer, _ transport: any HTTPTransport,
        _ authentication: OAuth2TokenRefresher.ClientAuthentication = .clientSecretBasic(
            id: "client", secret: clientSecret),
        scope: Set<String>? = nil, timeout: Duration = .seconds(30)
    ) throws -> OAuth2TokenRefresher {
        try OAuth2TokenRefresher(
            tokenEndpoint: server.tokenEndpoint, clientAuthentication: authentication, scope: scope,
            requestTimeout: timeout, transport: transport)
    }

    package static func credentials(_ refreshToken: String) -> Credentials {
        Credentials(
            accessToken: "at-old", refreshToken: refreshToken, tokenType: "Bearer", expiresAt: Date(),
            grantedPermissions: ["read"], declinedPermissions: ["admin"])
    }

    /// The typed error of a refresh that must fail.
    package static func refreshError(
        _ refresher: OAuth2TokenRefresher, _ refreshToken: String, _ what: String
    ) async throws -> UserSessionError {
        do {
            _ = try await refresher.refresh(credentials(refreshToken))
        } catch let error as UserSessionError {
            return error
        } catch {
            throw TransportCheckFailure(description: "\(what): untyped \(type(of: error))")
        }
        throw TransportCheckFailure(description: "\(what): the refresh succeeded")
    }

    private static func request(
        _ url: URL, timeout: Duration = .seconds(30), limit: Int = limit
    ) -> HTTPTransportRequest {
        HTTPTransportRequest(
            method: .post, url: url, headers: [("Content-Type", "application/x-www-form-urlencoded")],
            body: Data("grant_type=refresh_token&refresh_token=rt-none".utf8), timeout: timeout,
            maximumResponseBytes: limit)
    }

    // MARK: Checks

    private func basicAuthentication(_ transport: any HTTPTransport) async throws {
        try await OAuthFixtureServer.with { server in
            let refresher = try Self.refresher(server, transport)
            let (refreshToken, _) = try await server.issue()
            let before = Date()
            let refreshed = try await refresher.refresh(Self.credentials(refreshToken))
            let after = Date()
            try check(refreshed.accessToken.hasPrefix("at-"), "a new access token")
            try check(
                refreshed.refreshToken != refreshToken && refreshed.refreshToken?.hasPrefix("rt-") == true, "rotated")
            let expiry = refreshed.expiresAt ?? .distantPast
            try check(
                // The package reads a coarse real-time clock (a few milliseconds of resolution).
                expiry >= before.addingTimeInterval(3599.95) && expiry <= after.addingTimeInterval(3600.05),
                "the expiry counts from when the request was sent (\(before) ≤ \(expiry) - 1 h ≤ \(after))")
            try check(refreshed.source == .refresh, "source")
            try check(refreshed.grantedPermissions == ["read"] && refreshed.declinedPermissions == ["admin"], "scopes")
            let stats = try await server.stats()
            try check(stats.lastAuth == "basic" && stats.refreshes == 1, "one refresh with Basic authentication")
        }
    }

    private func postAuthentication(_ transport: any HTTPTransport) async throws {
        try await OAuthFixtureServer.with(["--auth", "post"]) { server in
            let refresher = try Self.refresher(
                server, transport, .clientSecretPost(id: "client", secret: Self.clientSecret))
            let (refreshToken, _) = try await server.issue()
            _ = try await refresher.refresh(Self.credentials(refreshToken))
            try check(try await server.stats().lastAuth == "post", "the secret went in the body")
        }
    }

    private func publicClient(_ transport: any HTTPTransport) async throws {
        try await OAuthFixtureServer.with(["--auth", "none"]) { server in
            let refresher = try Self.refresher(
                server, transport, .publicClient(id: "client"), scope: ["read", "write"])
            let (refreshToken, _) = try await server.issue()
            let refreshed = try await refresher.refresh(Self.credentials(refreshToken))
            let stats = try await server.stats()
            try check(stats.lastAuth == "none" && stats.lastScope == "read write", "id and scope only")
            try check(refreshed.grantedPermissions == ["read", "write"], "the requested scope is granted")
        }
    }

    private func failureClasses(_ transport: any HTTPTransport) async throws {
        let cases: [([String: Any], RefreshFailureClass, UserSessionError.Code)] = [
            (["mode": "error500"], .transient, .refreshFailed),
            (["mode": "garbage"], .transient, .malformedTokenResponse),
            (["mode": "status", "status": 503], .transient, .refreshFailed),
            (["mode": "status", "status": 429], .transient, .refreshFailed),
            (["mode": "status", "status": 408], .transient, .refreshFailed),
            (["mode": "status", "status": 404], .misconfiguration, .refreshFailed),
            (["mode": "invalid_client"], .misconfiguration, .refreshFailed),
            (["mode": "nested"], .transient, .malformedTokenResponse),
        ]
        try await OAuthFixtureServer.with { server in
            let refresher = try Self.refresher(server, transport)
            for (settings, expected, code) in cases {
                try await server.configure(settings)
                let (refreshToken, accessToken) = try await server.issue()
                let error = try await Self.refreshError(refresher, refreshToken, "\(settings)")
                try check(error.failureClass == expected && error.code == code, "\(settings): \(error)")
                for secret in [refreshToken, accessToken, Self.clientSecret] {
                    try check(!"\(error)".contains(secret), "\(settings): the error shows a secret")
                }
            }
            // A wrong client secret is the client's misconfiguration.
            try await server.configure(["mode": "normal"])
            let wrong = try Self.refresher(server, transport, .clientSecretBasic(id: "client", secret: "wrong"))
            let error = try await Self.refreshError(wrong, try await server.issue().refreshToken, "wrong secret")
            try check(error.failureClass == .misconfiguration && error.message.contains("invalid_client"), "\(error)")
        }
    }

    private func reuse(_ transport: any HTTPTransport) async throws {
        try await OAuthFixtureServer.with { server in
            let refresher = try Self.refresher(server, transport)
            let (refreshToken, _) = try await server.issue()
            let refreshed = try await refresher.refresh(Self.credentials(refreshToken))
            let error = try await Self.refreshError(refresher, refreshToken, "reuse")
            try check(error.failureClass == .terminal && error.message.contains("invalid_grant"), "\(error)")
            try check(!"\(error)".contains(refreshToken), "the error echoes the refresh token")
            // The whole family is revoked, including the token issued by the first refresh.
            let revoked = try await Self.refreshError(refresher, refreshed.refreshToken ?? "", "revoked family")
            try check(revoked.failureClass == .terminal, "\(revoked)")
        }
    }

    private func redirects(_ transport: any HTTPTransport) async throws {
        try await OAuthFixtureServer.with { server in
            let refresher = try Self.refresher(server, transport)
            for (mode, status) in [
                ("redirect", 307), ("redirect", 308), ("redirect", 303), ("redirect", 302), ("redirect", 301),
                ("redirect_other_host", 307),
            ] {
                try await server.configure(["mode": mode, "redirect_status": status])
                let response = try await transport.send(Self.request(server.tokenEndpoint))
                try check(
                    response.statusCode == status, "\(mode) \(status): the transport answered \(response.statusCode)")
                try check(response.headers["LOCATION"]?.hasSuffix("/elsewhere") == true, "\(mode) \(status): Location")
                let error = try await Self.refreshError(refresher, try await server.issue().refreshToken, mode)
                try check(
                    error.code == .refreshFailed && error.failureClass == .transient, "\(mode) \(status): \(error)")
                try check(
                    try await server.stats().redirectTargetHits == 0, "\(mode) \(status): the redirect was followed")
            }
        }
    }

    private func refusedConnection(_ transport: any HTTPTransport) async throws {
        let refusing = try RefusingLoopbackPort()
        let refresher = try OAuth2TokenRefresher(
            tokenEndpoint: refusing.url("/token"),
            clientAuthentication: .clientSecretBasic(id: "client", secret: Self.clientSecret), transport: transport)
        let error = try await Self.refreshError(refresher, "rt-any", "refused")
        withExtendedLifetime(refusing) {}
        try check(error.failureClass == .transient && error.code == .transportFailure, "\(error)")
    }

    private func timeouts(_ transport: any HTTPTransport) async throws {
        try await OAuthFixtureServer.with { server in
            // The server answers after 20 s, far beyond the 200-ms deadline: only the deadline can end these
            // requests in time, even on a loaded machine (3 s was once not enough headroom there).
            try await server.configure(["mode": "normal", "delay": 20])
            do {
                _ = try await transport.send(Self.request(server.tokenEndpoint, timeout: .milliseconds(200)))
                throw TransportCheckFailure(description: "the transport did not time out")
            } catch let error as HTTPTransportError {
                try check(error.code == .timedOut, "the transport threw \(error)")
            }
            let refresher = try Self.refresher(server, transport, timeout: .milliseconds(200))
            let error = try await Self.refreshError(refresher, "rt-any", "slow")
            try check(error.failureClass == .transient && error.code == .transportFailure, "\(error)")
            try check(error.message.contains("timed out"), "\(error)")
        }
    }

    private func bodyLimit(_ transport: any HTTPTransport) async throws {
        try await OAuthFixtureServer.with { server in
            let refresher = try Self.refresher(server, transport)
            try await server.configure(["mode": "sized", "bytes": Self.limit])
            let exact = try await refresher.refresh(Self.credentials(try await server.issue().refreshToken))
            try check(exact.accessToken == "at-sized", "a body of exactly 1 MiB is read")
            for settings: [String: Any] in [["mode": "sized", "bytes": Self.limit + 1], ["mode": "huge"]] {
                try await server.configure(settings)
                let error = try await Self.refreshError(refresher, try await server.issue().refreshToken, "\(settings)")
                try check(error.code == .malformedTokenResponse && error.failureClass == .transient, "\(error)")
                try check(error.message.contains("larger than"), "\(settings): \(error)")
            }
            // The transport reports it in the protocol's terms.
            do {
                _ = try await transport.send(Self.request(server.tokenEndpoint, limit: 10))
                throw TransportCheckFailure(description: "the transport read past its limit")
            } catch let error as HTTPTransportError {
                try check(error.code == .responseTooLarge, "the transport threw \(error)")
            }
        }
    }

    private func cancellation(_ transport: any HTTPTransport) async throws {
        try await OAuthFixtureServer.with { server in
            try await server.configure(["mode": "normal", "delay": 30])
            let refresher = try Self.refresher(server, transport)
            let refreshToken = try await server.issue().refreshToken
            let refreshing = Task { try await Self.refreshError(refresher, refreshToken, "cancelled") }
            // The request has arrived (and sleeps in the server) once the counter moves.
            while try await server.stats().tokenRequests == 0 { await Task.yield() }
            refreshing.cancel()
            let error = try await refreshing.value
            try check(error.failureClass == .cancelled, "\(error)")
            let sending = Task { try await transport.send(Self.request(server.tokenEndpoint, timeout: .seconds(3600))) }
            sending.cancel()
            do {
                _ = try await sending.value
                throw TransportCheckFailure(description: "a cancelled send answered")
            } catch is CancellationError {}
        }
    }
}
