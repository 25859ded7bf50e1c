#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

/// private_key_jwt (RFC 7523 §2.2) against the provider fixture, which verifies every assertion with Authlib
/// (issue 27).
@Suite(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
struct PrivateKeyJWTTests {
    /// A client of `provider` for `example-app` (which gets refresh tokens) authenticating with `signer`.
    private func client(
        _ provider: OpenIDProviderFixture, signer: PrivateKeyJWTSigner, audience: ClientAssertionAudience? = nil
    ) throws -> OpenIDConnectClient {
        var configuration = OpenIDConnectConfiguration(
            clientAuthentication: .privateKeyJWT(
                id: "example-app", audience: audience ?? .issuer(provider.issuer.absoluteString), signer: signer),
            redirectURI: try #require(URL(string: "http://127.0.0.1:8080/auth/callback")),
            scopes: ["openid", "profile", "email", "offline_access"])
        configuration.pendingSignInKeys = FleetKeys.keys
        return try OpenIDConnectClient(issuer: provider.issuer, configuration: configuration)
    }

    @Test(arguments: [PrivateKeyJWTSigner.Algorithm.rs256, .es256, .edDSA])
    func aSignInRefreshAndRevocationAuthenticateWithAssertions(algorithm: PrivateKeyJWTSigner.Algorithm)
        async throws
    {
        try await OpenIDProviderFixture.with { provider in
            let signer = try await provider.usePrivateKeyJWT(for: "example-app", algorithm: algorithm)
            let client = try client(provider, signer: signer)
            let signIn = try await client.completeSignIn(try await provider.callback(for: client))
            #expect(try await provider.stats()["last_auth"] as? String == "private_key_jwt")
            let credentials = try #require(signIn.prototype.credentials)

            let refresher = try await client.tokenRefresher(revocationEndpoint: provider.server.url("/revoke"))
            let directory = FileManager.default.temporaryDirectory.appending(path: "oidc-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            let registry = UserSessionRegistry(store: FileTokenStore(directory: directory), refresher: refresher)
            var expired = signIn.prototype
            expired.credentials?.expiresAt = Date(timeIntervalSinceNow: -60)
            let controller = try await registry.open(expired)
            let refreshed = try await controller.accessToken()
            #expect(refreshed != credentials.accessToken, "refreshed with an assertion")
            #expect(try await provider.count("refreshes") == 1)
            try await controller.closeAndClear()
            await registry.shutdown()
            let stats = try await provider.stats()
            #expect(stats["revocations"] as? Int == 1)
            #expect(stats["last_auth_revocation"] as? String == "private_key_jwt")
            #expect(stats["token_errors"] as? Int == 0)
        }
    }

    @Test func theAudienceCanBeTheEndpointForOlderProviders() async throws {
        try await OpenIDProviderFixture.with { provider in
            let signer = try await provider.usePrivateKeyJWT(for: "example-app", audience: "endpoint")
            let client = try client(provider, signer: signer, audience: .endpoint)
            let signIn = try await client.completeSignIn(try await provider.callback(for: client))
            #expect(signIn.prototype.credentials?.refreshToken != nil)
            #expect(try await provider.stats()["last_auth"] as? String == "private_key_jwt")
        }
    }

    @Test func anAssertionForAnotherAudienceIsRefusedAsMisconfiguration() async throws {
        try await OpenIDProviderFixture.with { provider in
            let signer = try await provider.usePrivateKeyJWT(for: "example-app")
            // The provider wants its issuer; the client addresses the token endpoint.
            let client = try client(provider, signer: signer, audience: .endpoint)
            let callback = try await provider.callback(for: client)
            let error = await expectRefusal(.tokenExchangeFailed) { _ = try await client.completeSignIn(callback) }
            #expect(error?.failureClass == .misconfiguration)
            #expect(error?.providerErrorCode == "invalid_client")
            #expect(try await provider.count("token_errors") == 1)
        }
    }

    @Test func anAssertionEchoedByTheProviderIsRedactedFromTheError() async throws {
        try await OpenIDProviderFixture.with { provider in
            let signer = try await provider.usePrivateKeyJWT(for: "example-app")
            let client = try client(provider, signer: signer)
            let callback = try await provider.callback(for: client)
            try await provider.misbehave(["echo_assertion": true])
            let error = await expectRefusal(.tokenExchangeFailed) { _ = try await client.completeSignIn(callback) }
            #expect(error?.message.contains("invalid_client (<redacted>)") == true, "\(String(describing: error))")
            #expect(error?.message.contains("eyJ") == false, "no part of a JWT")
        }
    }

    @Test func aReplayedAssertionIsRefusedAsMisconfiguration() async throws {
        try await OpenIDProviderFixture.with { provider in
            let signer = try await provider.usePrivateKeyJWT(for: "example-app")
            let replaying = ReplayingSigner(signer)
            let client = try client(provider, signer: signer)
            let signIn = try await client.completeSignIn(try await provider.callback(for: client))
            let credentials = try #require(signIn.prototype.credentials)
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: provider.server.url("/token"),
                clientAuthentication: .privateKeyJWT(
                    id: "example-app", audience: .issuer(provider.issuer.absoluteString), signer: replaying))
            _ = try await refresher.refresh(credentials)
            do {
                _ = try await refresher.refresh(credentials)
                Issue.record("a replayed assertion was accepted")
            } catch let error as UserSessionError {
                #expect(error.code == .refreshFailed && error.failureClass == .misconfiguration, "\(error)")
                #expect("\(error)".contains("invalid_client"))
            }
            #expect(try await provider.count("assertion_replays") == 1)
            #expect(try await provider.count("refreshes") == 1, "the replayed request refreshed nothing")
        }
    }

    @Test func aSignerThatFailsSendsNothingAndIsAMisconfiguration() async throws {
        try await OpenIDProviderFixture.with { provider in
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: provider.server.url("/token"),
                clientAuthentication: .privateKeyJWT(id: "example-app", audience: .endpoint, signer: FailingSigner()))
            let credentials = Credentials(accessToken: "a", refreshToken: "r")
            do {
                _ = try await refresher.refresh(credentials)
                Issue.record("a refresh without an assertion succeeded")
            } catch let error as UserSessionError {
                #expect(error.code == .invalidConfiguration && error.failureClass == .misconfiguration)
                #expect(!"\(error)".contains("SECRET-KEY-MATERIAL"))
            }
            #expect(try await provider.count("token_requests") == 0)
        }
    }

    @Test func assertionsAddressedToAnotherIssuerAreRefusedAtConfiguration() async throws {
        try await OpenIDProviderFixture.with { provider in
            let signer = try await provider.usePrivateKeyJWT(for: "example-app")
            #expect(throws: OpenIDConnectError.self) {
                _ = try client(provider, signer: signer, audience: .issuer(provider.issuer.absoluteString + "/"))
            }
        }
    }

    @Test func theKeyIsInNoDescription() async throws {
        try await OpenIDProviderFixture.with { provider in
            let answer = try await provider.control("/control/client-key", ["client": "web-app", "alg": "ES256"])
            let pem = try #require(answer["pem"] as? String)
            let signer = try PrivateKeyJWTSigner(pem: pem, algorithm: .es256, keyID: "k1")
            let authentication = OAuth2TokenRefresher.ClientAuthentication.privateKeyJWT(
                id: "web-app", audience: .issuer("https://id.example"), signer: signer)
            let body = pem.split(separator: "\n").dropFirst().first.map(String.init) ?? pem
            for text in [
                "\(signer)", "\(authentication)", String(reflecting: authentication), "\(String(describing: signer))",
            ] {
                #expect(!text.contains(body))
            }
            #expect("\(authentication)".contains("privateKeyJWT(id: web-app"))
            #expect(authentication == authentication)
            let other = try PrivateKeyJWTSigner(pem: pem, algorithm: .es256, keyID: "k1")
            #expect(
                authentication
                    != .privateKeyJWT(id: "web-app", audience: .issuer("https://id.example"), signer: other),
                "signers compare by identity")
            #expect(throws: OpenIDConnectError.self) {
                _ = try PrivateKeyJWTSigner(pem: pem, algorithm: .rs256, keyID: "k1")
            }
            do {
                _ = try PrivateKeyJWTSigner(pem: pem, algorithm: .edDSA, keyID: "k1")
            } catch {
                #expect(!"\(error)".contains(body))
            }
        }
    }
}

/// A signer that makes one assertion and hands it out every time after: a replay.
final class ReplayingSigner: ClientAssertionSigner {
    private let signer: PrivateKeyJWTSigner
    private let first = Locked<String?>(nil)

    init(_ signer: PrivateKeyJWTSigner) { self.signer = signer }

    func makeClientAssertion(clientID: String, audience: String) async throws -> String {
        if let kept = first.withLock({ $0 }) { return kept }
        let made = try await signer.makeClientAssertion(clientID: clientID, audience: audience)
        first.withLock { $0 = made }
        return made
    }
}

/// A signer whose key is unavailable.
final class FailingSigner: ClientAssertionSigner {
    struct KeyUnavailable: Error, CustomStringConvertible {
        var description: String { "SECRET-KEY-MATERIAL" }
    }

    func makeClientAssertion(clientID: String, audience: String) async throws -> String { throw KeyUnavailable() }
}
#endif
