import Foundation
import Testing

@testable import UserSessions

/// The refresher's side of ``SecretsTests``: client authentication, parsed token responses, and real refreshes
/// against the OAuth fixture.
extension SecretsTests {
    @Test func oauthRefreshersWithEveryKindOfClientAuthenticationNeverShowTheSecret() throws {
        let endpoint = try #require(URL(string: "https://auth.example.com/token"))
        let kinds: [OAuth2TokenRefresher.ClientAuthentication] = [
            .clientSecretBasic(id: "client", secret: Self.otherSecret),
            .clientSecretPost(id: "client", secret: Self.otherSecret), .publicClient(id: "client"),
        ]
        for kind in kinds {
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: endpoint, clientAuthentication: kind, scope: ["read"], requestTimeout: .seconds(5))
            Self.expectNoSecrets(in: kind, "ClientAuthentication \(kind)")
            Self.expectNoSecrets(in: refresher, "OAuth2TokenRefresher \(kind)")
            Self.expectNoSecrets(in: [refresher], "[OAuth2TokenRefresher]")
            Self.expectNoSecrets(in: Optional(refresher), "OAuth2TokenRefresher?")
            Self.expectNoSecrets(in: refresher as any TokenRefresher, "any TokenRefresher")
            let controller = UserSessionController(store: InMemoryTokenStore(), refresher: refresher)
            Self.expectNoSecrets(in: controller, "a controller holding \(kind)")
        }
        // The parser's errors for bodies that carry and echo tokens.
        let at = Self.accessToken
        let rt = Self.refreshToken
        let cs = Self.otherSecret
        let bodies: [(Int, String)] = [
            (400, #"{"error": "invalid_grant", "error_description": "refresh token \#(rt) reused with \#(cs)"}"#),
            (401, #"{"error": "\#(cs)", "error_description": "\#(at)"}"#),
            (400, #"{"error": "invalid_grant", "error_description": "\#(String(repeating: "x", count: 190))\#(rt)"}"#),
            (503, #"{"error": "temporarily_unavailable", "error_description": "\#(rt)\#(at)\#(cs)"}"#),
            (200, #"{"access_token": "\#(at)", "expires_in": "\#(rt)"}"#),
            (200, #"{"access_token": "\#(at)", "access_token": "\#(rt)"}"#),
            (400, #"{"error": "invalid_grant", "error": "\#(rt)"}"#),
        ]
        let previous = Credentials(accessToken: at, refreshToken: rt)
        for (status, body) in bodies {
            do {
                _ = try OAuth2TokenResponse.credentials(
                    status: status, body: Data(body.utf8), previous: previous, sentAt: Date(), secrets: [rt, at, cs])
                Issue.record("HTTP \(status) parsed")
            } catch {
                Self.expectNoSecrets(in: error, "HTTP \(status) error")
            }
        }
    }

    @Test func realRefreshesTheirFailuresAndTheirEventsNeverShowTokensOrTheClientSecret() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.otherSecret]) { server in
            let time = ManualTime()
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: Self.otherSecret), clock: time.clock)
            let store = ScriptedTokenStore()
            let controller = UserSessionController(
                store: store, refresher: refresher, configuration: .init(clock: time.clock))
            let events = controller.events(bufferSize: 256)
            var issued: [String] = []
            let (refreshToken, accessToken) = try await server.issue()
            issued += [refreshToken, accessToken]
            _ = try await controller.open(
                UserSessionPrototype(
                    userInfo: UserInfo(id: "alice"),
                    credentials: Credentials(
                        accessToken: accessToken, refreshToken: refreshToken,
                        expiresAt: time.now.addingTimeInterval(3600))))

            // A refresh that persists, then one whose persisting fails.
            time.advance(by: 3601)
            issued.append(try await controller.accessToken())
            issued.append(controller.credentials?.refreshToken ?? "")
            store.failNextSaves(1)
            time.advance(by: 3601)
            issued.append(try await controller.accessToken())
            issued.append(controller.credentials?.refreshToken ?? "")
            Self.expectNoSecrets(in: controller, "the controller after refreshes", also: issued)
            Self.expectNoSecrets(in: controller.credentials, "its credentials", also: issued)

            // A terminal failure: the server revoked the family.
            var errors: [any Error] = []
            try await server.revokeAll()
            time.advance(by: 3601)
            do {
                _ = try await controller.accessToken()
                Issue.record("refreshed revoked credentials")
            } catch {
                errors.append(error)
            }

            // invalid_client from a wrong secret that is itself a secret, and an invalid_grant whose description
            // echoes the reused refresh token.
            let (reused, reusedAccess) = try await server.issue()
            issued += [reused, reusedAccess]
            let rotated = try await refresher.refresh(Credentials(accessToken: reusedAccess, refreshToken: reused))
            issued += [rotated.accessToken, rotated.refreshToken ?? ""]
            do {
                _ = try await refresher.refresh(Credentials(accessToken: reusedAccess, refreshToken: reused))
                Issue.record("a reused refresh token was accepted")
            } catch {
                errors.append(error)
            }
            let wrongSecret = "cs-WRONG-SECRET-55aa"
            let wrong = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretPost(id: "client", secret: wrongSecret))
            let (fresh, freshAccess) = try await server.issue()
            issued += [fresh, freshAccess, wrongSecret]
            do {
                _ = try await wrong.refresh(Credentials(accessToken: freshAccess, refreshToken: fresh))
                Issue.record("a wrong client secret was accepted")
            } catch {
                errors.append(error)
            }
            let classes = errors.compactMap { ($0 as? UserSessionError)?.failureClass }
            #expect(classes == [.terminal, .terminal, .misconfiguration])
            let messages = errors.map { "\($0)" }.joined()
            #expect(messages.contains("invalid_grant") && messages.contains("invalid_client"))
            for error in errors { Self.expectNoSecrets(in: error, "refresh error", also: issued) }

            await controller.shutdown()
            var kinds: [String] = []
            for await event in events {
                Self.expectNoSecrets(in: event, "event \(event.kind)", also: issued)
                kinds.append("\(event.kind)")
            }
            for expected in ["refreshStarted", "credentialsRefreshed", "persistenceFailed", "refreshFailed(terminal)"] {
                #expect(kinds.contains(expected), "no \(expected) event in \(kinds)")
            }
            #expect(issued.allSatisfy { !$0.isEmpty })
        }
    }
}
