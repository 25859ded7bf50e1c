#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The server's own tokens (`ClientCredentialsTokenManager`) with private_key_jwt, against Authlib's
/// client-credentials grant and token exchange (`Tests/UserSessionsTests/Fixtures/authlib_client_credentials.py`
/// with `--auth private_key_jwt`), which verifies every assertion (issue 27).
@Suite(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
struct ClientTokensPrivateKeyJWTTests {
    /// Runs `body` with the Authlib server and a signer holding the client's key.
    private func withServer(_ body: (FixtureServer, PrivateKeyJWTSigner) async throws -> Void) async throws {
        try await FixtureServer.run(script: "authlib_client_credentials.py", arguments: ["--auth", "private_key_jwt"]) {
            server in
            let (data, _) = try await URLSession.shared.data(from: server.url("/admin/client-key"))
            let key = try #require(try JSONSerialization.jsonObject(with: data) as? [String: String])
            let signer = try PrivateKeyJWTSigner(
                pem: try #require(key["pem"]), algorithm: .es256, keyID: try #require(key["kid"]))
            try await body(server, signer)
        }
    }

    private func stats(_ server: FixtureServer) async throws -> [String: Any] {
        let (data, _) = try await URLSession.shared.data(from: server.url("/stats"))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test func clientCredentialsAndTokenExchangeAuthenticateWithAssertions() async throws {
        try await withServer { server, signer in
            let authentication = OAuth2TokenRefresher.ClientAuthentication.privateKeyJWT(
                id: "client", audience: .issuer(server.baseURL.absoluteString), signer: signer)
            let tokens = try ClientCredentialsTokenManager(
                tokenEndpoint: server.url("/token"), clientAuthentication: authentication)
            _ = try await tokens.accessToken(for: ClientCredentialsTokenManager.Key(scopes: ["orders.read"]))
            var stats = try await stats(server)
            #expect(stats["client_credentials"] as? Int == 1 && stats["last_auth"] as? String == "private_key_jwt")

            var request = URLRequest(url: server.url("/admin/issue"))
            request.httpMethod = "POST"
            let (issued, _) = try await URLSession.shared.data(for: request)
            let userToken = try #require(
                (try JSONSerialization.jsonObject(with: issued) as? [String: String])?["access_token"])
            try await withRegistry { registry in
                let alice = try await registry.open(
                    UserSessionPrototype(
                        userInfo: UserInfo(id: "alice"),
                        credentials: Credentials(accessToken: userToken, expiresAt: Date(timeIntervalSinceNow: 3600))))
                _ = try await tokens.exchangedToken(for: alice, audience: "https://billing.test")
            }
            stats = try await self.stats(server)
            #expect(stats["token_exchanges"] as? Int == 1 && stats["last_auth"] as? String == "private_key_jwt")
        }
    }

    @Test func anAssertionForAnotherAudienceRejectsTheClient() async throws {
        try await withServer { server, signer in
            let tokens = try ClientCredentialsTokenManager(
                tokenEndpoint: server.url("/token"),
                clientAuthentication: .privateKeyJWT(id: "client", audience: .endpoint, signer: signer))
            let error = await #expect(throws: UserSessionError.self) { try await tokens.accessToken() }
            #expect(error?.code == .clientRejected && error?.failureClass == .terminal, "\(String(describing: error))")
            #expect(try await stats(server)["client_credentials"] as? Int == 0)
        }
    }
}
#endif
