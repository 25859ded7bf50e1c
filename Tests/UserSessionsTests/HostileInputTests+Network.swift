import Foundation
import Testing

@testable import UserSessions

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Hostile HTTP answers from the remote store's and the token endpoint's servers.
extension HostileInputTests {
    // MARK: - HTTP

    @Test func hostileHTTPAnswersAreTypedErrorsFromTheRemoteStore() async throws {
        try await FixtureServer.run(script: "token_cache_server.py") { server in
            let store = try RemoteTokenStore(endpoint: server.url("/token_cache"))
            let session = Self.session("u", index: 0)
            func setMode(_ mode: String) async throws {
                let url = try #require(URL(string: server.url("/__control").absoluteString + "?mode=" + mode))
                _ = try await URLSession.shared.data(from: url)
            }
            func setCanned(_ body: Data) async throws {
                var request = URLRequest(url: server.url("/__canned"))
                request.httpMethod = "POST"
                request.httpBody = body
                _ = try await URLSession.shared.data(for: request)
            }

            // A 200 with an HTML page, and a body cut short of its Content-Length.
            for mode in ["html", "truncated"] {
                try await setMode(mode)
                await Self.expectCode(.transportFailure, mode) { _ = try await store.load(identifier: "u") }
                await Self.expectCode(.transportFailure, mode) { try await store.save(session, identifier: "u") }
                await Self.expectCode(.transportFailure, mode) { _ = try await store.loadCurrentIdentifier() }
            }

            // Complete HTTP answers with hostile bodies.
            try await setMode("canned")
            let nested = "{\"status\": \"true\", \"token_info\": \"" + String(repeating: "[", count: 100_000) + "\"}"
            let cannedCases: [(String, Data, UserSessionError.Code)] = [
                ("a JSON body cut short", Data(#"{"status": "true", "token_in"#.utf8), .transportFailure),
                ("100,000 nested arrays", Self.deepArrays, .transportFailure),
                ("50 MB unterminated string", Self.hugeUnterminated, .transportFailure),
                ("100,000 nested arrays inside token_info", Data(nested.utf8), .storeCorrupt),
                ("token_info of another shape", Data(#"{"status": "true", "token_info": "[1]"}"#.utf8), .storeCorrupt),
                ("a status of the wrong type", Data(#"{"status": 1, "token_info": "{}"}"#.utf8), .transportFailure),
            ]
            for (name, body, code) in cannedCases {
                try await setCanned(body)
                await Self.expectCode(code, name) { _ = try await store.load(identifier: "u") }
            }
        }
    }

    /// Hostile token endpoints, through a real `OAuth2TokenRefresher` against the OAuth fixture: each answer is a
    /// typed, classified error (or, for a huge `expires_in`, the documented clamp to 100 years). A redirect to the
    /// same host and another path is covered by the shared transport suite (`TransportCheck`);
    /// `aRedirectToAnotherHostNeverCarriesTheRefreshTokenOrTheSecret` below sends it to another host.
    @Test func hostileTokenEndpointAnswersAreTypedErrorsFromTheRefresher() async throws {
        let cases: [(String, [String: Any], [UserSessionError.Code])] = [
            ("a 200 with an HTML page", ["mode": "garbage"], [.malformedTokenResponse]),
            // Cut short of its Content-Length: the transport reports the lost connection (or, if it hands over
            // what arrived, the parser refuses the cut JSON).
            ("a body cut short", ["mode": "truncated"], [.transportFailure, .malformedTokenResponse]),
            ("100,000 nested arrays", ["mode": "nested"], [.malformedTokenResponse]),
            ("a 50 MB token response", ["mode": "huge"], [.malformedTokenResponse]),
            ("a negative expires_in", ["mode": "normal", "expires_in": -5], [.malformedTokenResponse]),
            ("a negative expires_in string", ["mode": "normal", "expires_in": "-1"], [.malformedTokenResponse]),
            ("an infinite expires_in", ["mode": "normal", "expires_in": "1e999"], [.malformedTokenResponse]),
            ("an expires_in that is not a number", ["mode": "normal", "expires_in": [1]], [.malformedTokenResponse]),
        ]
        try await OAuthFixtureServer.with { server in
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"))
            for (name, settings, codes) in cases {
                try await server.configure(settings)
                let (refreshToken, accessToken) = try await server.issue()
                let previous = Credentials(accessToken: accessToken, refreshToken: refreshToken)
                do {
                    _ = try await refresher.refresh(previous)
                    Issue.record("\(name): refreshed")
                } catch let error as UserSessionError {
                    #expect(codes.contains(error.code), "\(name): \(error)")
                    #expect(error.failureClass == .transient, "\(name): \(error)")
                    for secret in [refreshToken, accessToken, "client-secret"] {
                        #expect(!"\(error)".contains(secret), "\(name) shows a secret")
                    }
                    if name.hasPrefix("a 50 MB") {
                        #expect(error.message.contains("larger than"), "\(name): read past the size limit")
                    }
                } catch {
                    Issue.record("\(name): untyped \(type(of: error))")
                }
            }

            // Huge lifetimes are clamped to 100 years from when the request was sent, never overflowing a Date.
            let time = ManualTime()
            let clocked = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"), clock: time.clock)
            for huge: Any in [1e300, "99999999999999999999999999999999", 9_223_372_036_854_775_807] {
                try await server.configure(["mode": "normal", "expires_in": huge])
                let (refreshToken, accessToken) = try await server.issue()
                let refreshed = try await clocked.refresh(
                    Credentials(accessToken: accessToken, refreshToken: refreshToken))
                #expect(refreshed.expiresAt == time.now.addingTimeInterval(OAuth2TokenResponse.maximumLifetime))
            }
        }
    }

    /// A token endpoint that takes its time: cancelling the refreshing task cancels the request at once (the
    /// transport does not wait for the answer) and the error is classified `cancelled`.
    @Test func cancellingASlowRefreshCancelsItsRequest() async throws {
        try await OAuthFixtureServer.with { server in
            try await server.configure(["mode": "normal", "delay": 30])
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"))
            let (refreshToken, accessToken) = try await server.issue()
            let refreshing = Task {
                try await refresher.refresh(Credentials(accessToken: accessToken, refreshToken: refreshToken))
            }
            // The request has arrived (and sleeps in the server) once the counter moves.
            while try await server.stats().tokenRequests == 0 { await Task.yield() }
            refreshing.cancel()
            do {
                _ = try await refreshing.value
                Issue.record("the refresh finished")
            } catch let error as UserSessionError {
                #expect(error.failureClass == .cancelled, "\(error)")
            }
        }
    }

    /// A 307 to another host name for the same server: a client that followed it could re-send the form body with
    /// the refresh token, and the Basic client credentials, there. The refresher never follows it. The control: a
    /// following client (`URLSession.shared`, which on Linux drops a 307's body but keeps the `Authorization`
    /// header) does reach the other host with the client secret, so the fixture would see a leak.
    @Test func aRedirectToAnotherHostNeverCarriesTheRefreshTokenOrTheSecret() async throws {
        try await OAuthFixtureServer.with { server in
            func stats() async throws -> [String: Any] {
                let (data, _) = try await URLSession.shared.data(from: server.baseURL.appendingPathComponent("stats"))
                return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
            }
            try await server.configure(["mode": "redirect_other_host"])
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"))
            let (refreshToken, accessToken) = try await server.issue()
            do {
                _ = try await refresher.refresh(Credentials(accessToken: accessToken, refreshToken: refreshToken))
                Issue.record("refreshed through a redirect")
            } catch let error as UserSessionError {
                #expect(error.code == .refreshFailed && error.failureClass == .transient, "\(error)")
            }
            var counters = try await stats()
            #expect(counters["redirect_target_hits"] as? Int == 0)
            #expect(counters["redirect_target_saw_secret"] as? Int == 0)

            // The control: a client that follows redirects takes the client credentials to the other host.
            var request = URLRequest(url: server.tokenEndpoint)
            request.httpMethod = "POST"
            request.httpBody = Data("grant_type=refresh_token&refresh_token=\(refreshToken)".utf8)
            request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
            request.setValue("Basic Y2xpZW50OmNsaWVudC1zZWNyZXQ=", forHTTPHeaderField: "Authorization")
            _ = try? await URLSession.shared.data(for: request)
            counters = try await stats()
            #expect(counters["redirect_target_hits"] as? Int == 1)
            #expect(counters["redirect_target_saw_secret"] as? Int == 1)
        }
    }
}
