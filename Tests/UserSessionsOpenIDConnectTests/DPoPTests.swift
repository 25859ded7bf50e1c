#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

/// DPoP (RFC 9449) against the provider fixture, which verifies every proof (signature, `typ`, `jwk`, `jti` replay
/// cache, `htm`, `htu`, `iat`, `ath`, nonces) and binds the tokens to the key's thumbprint (issue 27).
@Suite(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
struct DPoPTests {
    /// A client of `provider` for `example-app` (which gets refresh tokens), with DPoP proofs from `signer`.
    private func client(
        _ provider: OpenIDProviderFixture, dpop: DPoPProofs?,
        authentication: OAuth2TokenRefresher.ClientAuthentication = .clientSecretBasic(
            id: "example-app", secret: "example-secret"),
        configure: (inout OpenIDConnectConfiguration) -> Void = { _ in }
    ) throws -> OpenIDConnectClient {
        var configuration = OpenIDConnectConfiguration(
            clientAuthentication: authentication,
            redirectURI: try #require(URL(string: "http://127.0.0.1:8080/auth/callback")),
            scopes: ["openid", "profile", "email", "offline_access"], dpop: dpop)
        configuration.pendingSignInKeys = FleetKeys.keys
        configure(&configuration)
        return try OpenIDConnectClient(issuer: provider.issuer, configuration: configuration)
    }

    /// Switches the provider's DPoP on with `settings` (`required`, `nonce`, `resource_nonce`).
    private func dpop(_ provider: OpenIDProviderFixture, _ settings: [String: Any] = [:]) async throws {
        _ = try await provider.control("/control/dpop", settings.merging(["enabled": true]) { $1 })
    }

    /// Signs in with `client` and returns the credentials of the sign-in.
    private func signIn(_ provider: OpenIDProviderFixture, _ client: OpenIDConnectClient) async throws -> Credentials {
        let signIn = try await client.completeSignIn(try await provider.callback(for: client))
        return try #require(signIn.prototype.credentials)
    }

    /// The thumbprints of the proofs of the refreshes the provider granted, in order.
    private func refreshThumbprints(_ provider: OpenIDProviderFixture) async throws -> [String?] {
        try #require(try await provider.stats()["refresh_jkts"] as? [Any]).map { $0 as? String }
    }

    @Test(arguments: [DPoPKey.Algorithm.es256, .edDSA, .rs256])
    func aSignInBindsTheTokensToAKeyThatEveryLaterRequestProves(algorithm: DPoPKey.Algorithm) async throws {
        try await OpenIDProviderFixture.with { provider in
            try await dpop(provider, ["required": true])
            let proofs = DPoPProofs(signer: DPoPSigner(), algorithm: algorithm)
            let client = try client(provider, dpop: proofs)
            let redirect = try await client.authorizationRedirect()
            let query = URLComponents(url: redirect.url, resolvingAgainstBaseURL: false)?.queryItems ?? []
            let sentThumbprint = try #require(query.first { $0.name == "dpop_jkt" }?.value)
            let signIn = try await client.completeSignIn(
                callbackQuery: try await provider.logIn(redirect.url), sealedPendingSignIn: redirect.sealedPendingSignIn
            )
            let credentials = try #require(signIn.prototype.credentials)
            let key = try #require(credentials.dpopKey)
            #expect(key.algorithm == algorithm && credentials.tokenType == "DPoP")
            let thumbprint = try proofs.thumbprint(of: key)
            #expect(thumbprint == sentThumbprint, "the code was asked for with this key's thumbprint")
            #expect(!"\(credentials)".contains(key.storedForm.dropFirst(8)), "the key stays out of descriptions")

            let directory = FileManager.default.temporaryDirectory.appending(path: "dpop-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            let refresher = try await client.tokenRefresher(revocationEndpoint: provider.server.url("/revoke"))
            let registry = UserSessionRegistry(store: FileTokenStore(directory: directory), refresher: refresher)
            var expired = signIn.prototype
            expired.credentials?.expiresAt = Date(timeIntervalSinceNow: -60)
            let controller = try await registry.open(expired)
            _ = try await controller.accessToken()
            #expect(try await refreshThumbprints(provider) == [thumbprint], "the refresh proved the same key")

            let answer = try await controller.withAuthorization(method: "GET", url: provider.server.url("/api/profile"))
            {
                headers in
                try await URLSessionHTTPTransport().send(
                    HTTPTransportRequest(
                        method: .get, url: provider.server.url("/api/profile"), headers: headers, timeout: .seconds(20),
                        maximumResponseBytes: 1 << 20))
            }
            #expect(answer.statusCode == 200)
            let profile = try #require(try JSONSerialization.jsonObject(with: answer.body) as? [String: Any])
            #expect((profile["cnf"] as? [String: Any])?["jkt"] as? String == thumbprint)

            try await controller.closeAndClear()
            await registry.shutdown()
            let stats = try await provider.stats()
            #expect(stats["dpop_revocations"] as? Int == 1 && stats["revocations"] as? Int == 1)
            #expect(stats["dpop_refused"] as? Int == 0 && stats["token_errors"] as? Int == 0)
        }
    }

    @Test func aRestartOnTheSameStoreRefreshesWithTheStoredKey() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await dpop(provider, ["required": true])
            let directory = FileManager.default.temporaryDirectory.appending(path: "dpop-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            // The first life: sign in and keep the session.
            let first = try client(provider, dpop: DPoPProofs(signer: DPoPSigner()))
            let credentials = try await signIn(provider, first)
            let thumbprint = try DPoPProofs(signer: DPoPSigner()).thumbprint(of: try #require(credentials.dpopKey))
            let before = UserSessionRegistry(
                store: FileTokenStore(directory: directory), refresher: try await first.tokenRefresher())
            var prototype = UserSessionPrototype(
                identifier: "alice", userInfo: UserInfo(id: "alice"), credentials: credentials)
            prototype.credentials?.expiresAt = Date(timeIntervalSinceNow: -60)
            _ = try await before.open(prototype)
            await before.shutdown()
            // The second life: new objects everywhere (signer, proofs, client, store); only the files remain.
            let second = try client(provider, dpop: DPoPProofs(signer: DPoPSigner()))
            let after = UserSessionRegistry(
                store: FileTokenStore(directory: directory), refresher: try await second.tokenRefresher())
            let token = try await after.session(for: "alice").accessToken()
            #expect(token != credentials.accessToken)
            #expect(try await refreshThumbprints(provider) == [thumbprint])
            await after.shutdown()
        }
    }

    /// The restart as it happens: this process signs in with DPoP, stores the session and lets it go; another
    /// process (`FleetNode --dpop`, with a signer and proofs of its own) restores it from the same files and refreshes:
    /// the provider, which binds the refresh token to the key, sees the same thumbprint.
    @Test func anotherProcessOnTheSameStoreRefreshesWithTheStoredKey() async throws {
        let executable = try #require(
            locateBuiltExecutable(named: "FleetNode"), "FleetNode was not built next to the test bundle")
        try await OpenIDProviderFixture.with { provider in
            try await dpop(provider, ["required": true])
            let directory = FileManager.default.temporaryDirectory.appending(path: "dpop-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            let proofs = DPoPProofs(signer: DPoPSigner())
            let client = try client(provider, dpop: proofs)
            let credentials = try await signIn(provider, client)
            let thumbprint = try proofs.thumbprint(of: try #require(credentials.dpopKey))
            let registry = UserSessionRegistry(
                store: FileTokenStore(directory: directory), refresher: try await client.tokenRefresher())
            var prototype = UserSessionPrototype(identifier: "alice", userInfo: UserInfo(id: "alice"))
            prototype.credentials = credentials
            prototype.credentials?.expiresAt = Date(timeIntervalSinceNow: -60)
            _ = try await registry.open(prototype)
            await registry.shutdown()
            let node = try await NodeProcess.run(
                executable,
                [
                    "--store", "file:" + directory.path, "--identifier", "alice", "--token-endpoint",
                    provider.server.url("/token").absoluteString, "--client-id", "example-app", "--client-secret",
                    "example-secret", "--tasks", "4", "--until-lifetime-over", "600", "--time-limit", "30",
                    "--stop-on-error", "--dpop", "--name", "restarted",
                ])
            #expect(node.status == 0 && node.summary["errors"] as? Int == 0, "\(node.summaryLine)")
            #expect(node.summary["refreshes"] as? Int == 1, "\(node.summaryLine)")
            #expect(try await refreshThumbprints(provider) == [thumbprint])
            #expect(try await provider.count("dpop_refused") == 0)
        }
    }

    @Test func aNonceChallengeAtTheTokenEndpointIsAnsweredOnceAndRefreshesOnce() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await dpop(provider, ["required": true, "nonce": true])
            let proofs = DPoPProofs(signer: DPoPSigner())
            let client = try client(provider, dpop: proofs)
            let credentials = try await signIn(provider, client)
            #expect(try await provider.count("dpop_nonce_challenges") == 1, "the code exchange learnt the nonce")
            // A new nonce at the provider: the refresh is challenged once, sent again, and rotates once.
            try await dpop(provider, ["required": true, "nonce": true])
            let refresher = try await client.tokenRefresher()
            let refreshed = try await refresher.refresh(credentials)
            #expect(refreshed.refreshToken != credentials.refreshToken && refreshed.dpopKey == credentials.dpopKey)
            let stats = try await provider.stats()
            #expect(stats["dpop_nonce_challenges"] as? Int == 2)
            #expect(stats["refreshes"] as? Int == 1)
            #expect((stats["refresh_jkts"] as? [Any])?.count == 1)
        }
    }

    @Test func aServerThatKeepsAskingForANewNonceGetsOneRetryAndNoRefresh() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await dpop(provider, ["required": true, "nonce": true])
            let client = try client(provider, dpop: DPoPProofs(signer: DPoPSigner()))
            let credentials = try await signIn(provider, client)
            // The provider moves to a new nonce, and answers the proof that carries it with yet another one.
            try await dpop(provider, ["required": true, "nonce": true])
            try await provider.misbehave(["dpop_nonce_again": true])
            let requestsBefore = try await provider.count("token_requests")
            let refresher = try await client.tokenRefresher()
            await #expect {
                _ = try await refresher.refresh(credentials)
            } throws: { error in
                let error = error as? UserSessionError
                return error?.code == .refreshFailed && error?.failureClass == .misconfiguration
                    && error?.message.contains("use_dpop_nonce") == true
            }
            #expect(try await provider.count("token_requests") == requestsBefore + 2, "one retry, not more")
            #expect(try await provider.count("refreshes") == 0)
        }
    }

    @Test func aResourceServerNonceChallengeIsAnsweredWithoutARefresh() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await dpop(provider, ["required": true, "resource_nonce": true])
            let client = try client(provider, dpop: DPoPProofs(signer: DPoPSigner()))
            let credentials = try await signIn(provider, client)
            let registry = UserSessionRegistry(
                store: InMemoryTokenStore(), refresher: try await client.tokenRefresher())
            let controller = try await registry.open(
                UserSessionPrototype(identifier: "alice", userInfo: UserInfo(id: "alice"), credentials: credentials))
            var sent = 0
            let answer = try await controller.withAuthorization(method: "GET", url: provider.server.url("/api/profile"))
            {
                headers in
                sent += 1
                return try await URLSessionHTTPTransport().send(
                    HTTPTransportRequest(
                        method: .get, url: provider.server.url("/api/profile"), headers: headers, timeout: .seconds(20),
                        maximumResponseBytes: 1 << 20))
            }
            #expect(answer.statusCode == 200 && sent == 2)
            #expect(try await provider.count("dpop_nonce_challenges") == 1)
            #expect(try await provider.count("refreshes") == 0, "a nonce challenge is not an expired token")
            // The nonce is remembered: the next request is not challenged.
            let withQuery = try #require(
                URL(string: provider.server.url("/api/profile").absoluteString + "?fields=all"))
            let headers = try await controller.authorizationHeaders(method: "GET", url: withQuery)
            let again = try await URLSessionHTTPTransport().send(
                HTTPTransportRequest(
                    method: .get, url: withQuery, headers: headers,
                    timeout: .seconds(20), maximumResponseBytes: 1 << 20))
            #expect(again.statusCode == 200, "htu leaves the query out")
            await registry.shutdown()
        }
    }

    @Test func aDowngradeToBearerIsRefusedAtSignInAndAtRefresh() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await dpop(provider, ["required": true])
            let client = try client(provider, dpop: DPoPProofs(signer: DPoPSigner()))
            let callback = try await provider.callback(for: client)
            try await provider.misbehave(["dpop_downgrade": true])
            let error = await expectRefusal(.dpopDowngraded) { _ = try await client.completeSignIn(callback) }
            #expect(error?.message.contains("\"Bearer\"") == true)

            let credentials = try await signIn(provider, client)
            try await provider.misbehave(["dpop_downgrade": true])
            await #expect {
                _ = try await client.tokenRefresher().refresh(credentials)
            } throws: { error in
                let error = error as? UserSessionError
                return error?.code == .dpopDowngraded && error?.failureClass == .terminal
            }
        }
    }

    @Test func boundCredentialsWithoutProofsSendNothing() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await dpop(provider, ["required": true])
            let credentials = try await signIn(provider, try client(provider, dpop: DPoPProofs(signer: DPoPSigner())))
            let requests = try await provider.count("token_requests")
            let bearerOnly = try OAuth2TokenRefresher(
                tokenEndpoint: provider.server.url("/token"),
                clientAuthentication: .clientSecretBasic(id: "example-app", secret: "example-secret"))
            await #expect {
                _ = try await bearerOnly.refresh(credentials)
            } throws: { error in
                let error = error as? UserSessionError
                return error?.code == .dpopProofFailed && error?.failureClass == .misconfiguration
            }
            #expect(try await provider.count("token_requests") == requests, "no unbound request was sent")
        }
    }

    @Test func aClientWithoutDPoPIsRefusedByAProviderThatRequiresIt() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await dpop(provider, ["required": true])
            let client = try client(provider, dpop: nil)
            let callback = try await provider.callback(for: client)
            let error = await expectRefusal(.tokenExchangeFailed) { _ = try await client.completeSignIn(callback) }
            #expect(error?.failureClass == .misconfiguration && error?.providerErrorCode == "invalid_dpop_proof")
        }
    }

    /// Proofs a thief or a broken client would send, each refused by the provider: a typed error, and no refresh.
    @Test(arguments: [
        TamperingSigner.Tampering.replay, .otherURL, .otherMethod, .stale, .otherKey,
    ])
    func aTamperedProofIsRefusedAndRefreshesNothing(tampering: TamperingSigner.Tampering) async throws {
        try await OpenIDProviderFixture.with { provider in
            try await dpop(provider, ["required": true])
            let honest = DPoPProofs(signer: DPoPSigner())
            let credentials = try await signIn(provider, try client(provider, dpop: honest))
            let tampered = DPoPProofs(signer: try TamperingSigner(tampering))
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: provider.server.url("/token"),
                clientAuthentication: .clientSecretBasic(id: "example-app", secret: "example-secret"), dpop: tampered)
            if tampering == .replay { _ = try await refresher.refresh(credentials) }
            await #expect {
                _ = try await refresher.refresh(credentials)
            } throws: { error in
                let error = error as? UserSessionError
                return error?.code == .refreshFailed && error?.failureClass == .misconfiguration
                    && error?.message.contains("invalid_dpop_proof") == true
            }
            #expect(try await provider.count("refreshes") == (tampering == .replay ? 1 : 0))
            if tampering == .replay { #expect(try await provider.count("dpop_replays") == 1) }
            // Nothing was revoked: the honest key still refreshes.
            if tampering != .replay {
                let refreshed = try await OAuth2TokenRefresher(
                    tokenEndpoint: provider.server.url("/token"),
                    clientAuthentication: .clientSecretBasic(id: "example-app", secret: "example-secret"), dpop: honest
                ).refresh(credentials)
                #expect(refreshed.tokenType == "DPoP")
            }
        }
    }

    @Test func aBoundAccessTokenIsUselessAsABearerToken() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await dpop(provider, ["required": true])
            let credentials = try await signIn(provider, try client(provider, dpop: DPoPProofs(signer: DPoPSigner())))
            let stolen = try await URLSessionHTTPTransport().send(
                HTTPTransportRequest(
                    method: .get, url: provider.server.url("/api/profile"),
                    headers: [("Authorization", "Bearer " + credentials.accessToken)], timeout: .seconds(20),
                    maximumResponseBytes: 1 << 20))
            #expect(stolen.statusCode == 401)
        }
    }

    // MARK: - FAPI 2.0

    @Test func theFAPI2ProfileSignsInWithPARPrivateKeyJWTAndDPoP() async throws {
        try await OpenIDProviderFixture.with { provider in
            _ = try await provider.control("/control/fapi", ["enabled": true])
            // FAPI 2.0 allows no RS256 ID tokens (the fixture's default), so the profile refuses them: ES256 here.
            try await provider.signWith("ES256")
            let signer = try await provider.usePrivateKeyJWT(for: "example-app", algorithm: .es256)
            let client = try client(
                provider, dpop: DPoPProofs(signer: DPoPSigner()),
                authentication: .privateKeyJWT(
                    id: "example-app", audience: .issuer(provider.issuer.absoluteString), signer: signer)
            ) { $0.profile = .fapi2 }
            let redirect = try await client.authorizationRedirect()
            let browser = Set(
                (URLComponents(url: redirect.url, resolvingAgainstBaseURL: false)?.queryItems ?? []).map(\.name))
            #expect(browser == ["client_id", "request_uri"])
            let pushed = try #require(try await provider.pushedRequests().first)
            #expect(pushed["dpop_jkt"]?.count == 43 && pushed["code_challenge_method"] == "S256")
            let signIn = try await client.completeSignIn(
                callbackQuery: try await provider.logIn(redirect.url), sealedPendingSignIn: redirect.sealedPendingSignIn
            )
            let credentials = try #require(signIn.prototype.credentials)
            #expect(credentials.tokenType == "DPoP" && credentials.dpopKey != nil)
            let refreshed = try await client.tokenRefresher().refresh(credentials)
            #expect(refreshed.tokenType == "DPoP")
            let stats = try await provider.stats()
            #expect(stats["last_auth"] as? String == "private_key_jwt" && stats["token_errors"] as? Int == 0)
        }
    }

    @Test func theFAPI2ProfileRefusesAWeakerConfiguration() throws {
        let issuer = try #require(URL(string: "http://127.0.0.1:9"))
        func make(_ authentication: OAuth2TokenRefresher.ClientAuthentication, dpop: DPoPProofs?) throws {
            var configuration = OpenIDConnectConfiguration(
                clientAuthentication: authentication, redirectURI: OpenIDProviderFixture.redirectURI, dpop: dpop,
                profile: .fapi2)
            configuration.pendingSignInKeys = FleetKeys.keys
            _ = try OpenIDConnectClient(issuer: issuer, configuration: configuration)
        }
        let signer = FixedAssertionSigner()
        let cases: [(OAuth2TokenRefresher.ClientAuthentication, DPoPProofs?, String)] = [
            (.clientSecretBasic(id: "a", secret: "s"), DPoPProofs(signer: DPoPSigner()), "private_key_jwt"),
            (.privateKeyJWT(id: "a", audience: .endpoint, signer: signer), DPoPProofs(signer: DPoPSigner()), "issuer"),
            (.privateKeyJWT(id: "a", audience: .issuer(issuer.absoluteString), signer: signer), nil, "DPoP"),
            (
                .privateKeyJWT(id: "a", audience: .issuer(issuer.absoluteString), signer: signer),
                DPoPProofs(signer: DPoPSigner(), algorithm: .rs256), "RS256"
            ),
        ]
        for (authentication, dpop, named) in cases {
            #expect {
                try make(authentication, dpop: dpop)
            } throws: { error in
                let error = error as? OpenIDConnectError
                return error?.code == .invalidConfiguration && error?.message.contains(named) == true
            }
        }
        try make(
            .privateKeyJWT(id: "a", audience: .issuer(issuer.absoluteString), signer: signer),
            dpop: DPoPProofs(signer: DPoPSigner()))
    }

    @Test func theFAPI2ProfileRefusesAProviderWithoutPushedRequests() async throws {
        try await OpenIDProviderFixture.with { provider in
            try await dpop(provider)
            let signer = try await provider.usePrivateKeyJWT(for: "example-app")
            let client = try client(
                provider, dpop: DPoPProofs(signer: DPoPSigner()),
                authentication: .privateKeyJWT(
                    id: "example-app", audience: .issuer(provider.issuer.absoluteString), signer: signer)
            ) { $0.profile = .fapi2 }
            let error = await expectRefusal(.invalidConfiguration) { _ = try await client.authorizationRedirect() }
            #expect(error?.message.contains("pushed authorization") == true, "\(String(describing: error))")
            #expect(try await provider.count("par_requests") == 0)
        }
    }
}

/// A DPoP signer that makes the proofs an attacker or a broken client would: replayed, for another URL or method,
/// stale, or signed by a key other than the credentials'.
final class TamperingSigner: DPoPProofSigner {
    enum Tampering: Sendable, CustomTestStringConvertible {
        case replay, otherURL, otherMethod, stale, otherKey
        var testDescription: String { "\(self)" }
    }

    let tampering: Tampering
    private let honest = DPoPSigner()
    private let other: DPoPKey
    private let first = Locked<String?>(nil)

    init(_ tampering: Tampering) throws {
        self.tampering = tampering
        other = try DPoPSigner().makeKey(.es256)
    }

    func makeKey(_ algorithm: DPoPKey.Algorithm) throws -> DPoPKey { try honest.makeKey(algorithm) }
    func thumbprint(of key: DPoPKey) throws -> String { try honest.thumbprint(of: key) }

    func makeProof(
        key: DPoPKey, method: String, url: String, issuedAt: Date, nonce: String?, accessToken: String?
    ) async throws -> String {
        switch tampering {
        case .replay:
            if let proof = first.withLock({ $0 }) { return proof }
            let proof = try await honest.makeProof(
                key: key, method: method, url: url, issuedAt: issuedAt, nonce: nonce, accessToken: accessToken)
            first.withLock { $0 = proof }
            return proof
        case .otherURL:
            return try await honest.makeProof(
                key: key, method: method, url: url + "/elsewhere", issuedAt: issuedAt, nonce: nonce,
                accessToken: accessToken)
        case .otherMethod:
            return try await honest.makeProof(
                key: key, method: "GET", url: url, issuedAt: issuedAt, nonce: nonce, accessToken: accessToken)
        case .stale:
            return try await honest.makeProof(
                key: key, method: method, url: url, issuedAt: issuedAt.addingTimeInterval(-600), nonce: nonce,
                accessToken: accessToken)
        case .otherKey:
            return try await honest.makeProof(
                key: other, method: method, url: url, issuedAt: issuedAt, nonce: nonce, accessToken: accessToken)
        }
    }
}

/// A client assertion signer for configuration checks that never sign.
final class FixedAssertionSigner: ClientAssertionSigner {
    func makeClientAssertion(clientID: String, audience: String) async throws -> String { "unused" }
}
#endif
