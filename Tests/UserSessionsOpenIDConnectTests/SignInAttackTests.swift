#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

/// The issue's attack table: each attack is sent for real by the provider (or the callback), is refused with its
/// typed error, and opens nothing. The DocC article "Signing users in" lists the same rows.
@Suite(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
struct SignInAttackTests {
    /// Makes the provider misbehave with `fault` on the next ID token, signs in, and expects `code`.
    private func expectIDTokenRefused(
        _ fault: String, _ code: OpenIDConnectError.Code, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            try await withRegistry { registry in
                try await provider.misbehave(["id_token": fault])
                let query = try await provider.callback(for: client)
                let error = await expectRefusal(code, sourceLocation: sourceLocation) {
                    _ = try await registry.open(try await client.completeSignIn(query).prototype)
                }
                #expect(error?.failureClass == nil, "a refusal, not a failure to retry", sourceLocation: sourceLocation)
                // The error names what failed, never the callback's code or state.
                for secret in query.query.split(separator: "&").compactMap({ $0.split(separator: "=").last }) {
                    #expect(!"\(error.map { String(reflecting: $0) } ?? "")".contains(secret))
                }
                #expect(
                    try await registry.storedIdentifiers().isEmpty, "nothing opened", sourceLocation: sourceLocation)
            }
        }
    }

    @Test("oidcc-client-test-idtoken-sig-none") func anIDTokenWithAlgNoneIsRefused() async throws {
        try await expectIDTokenRefused("alg_none", .algorithmRefused)
    }

    @Test("oidcc-client-test-invalid-sig-hs256") func anIDTokenSignedWithHS256KeyedByTheRSAPublicKeyIsRefused()
        async throws
    {
        try await expectIDTokenRefused("hs256_public_key", .algorithmRefused)
    }

    @Test("oidcc-client-test-invalid-aud") func anIDTokenWithAWrongAudienceIsRefused() async throws {
        try await expectIDTokenRefused("wrong_aud", .audienceMismatch)
    }

    @Test func anIDTokenForSeveralAudiencesWithoutAzpIsRefused() async throws {
        try await expectIDTokenRefused("multiple_aud_without_azp", .audienceMismatch)
    }

    @Test("oidcc-client-test-invalid-iss") func anIDTokenFromAnotherIssuerIsRefused() async throws {
        try await expectIDTokenRefused("wrong_iss", .issuerMismatch)
    }

    @Test("oidcc-client-test-nonce-invalid") func anIDTokenWithAnotherNonceIsRefused() async throws {
        try await expectIDTokenRefused("wrong_nonce", .nonceMismatch)
    }

    @Test func anIDTokenWithoutNonceIsRefused() async throws {
        try await expectIDTokenRefused("no_nonce", .nonceMismatch)
    }

    @Test func anExpiredIDTokenIsRefused() async throws {
        try await expectIDTokenRefused("expired", .tokenExpired)
    }

    @Test func anIDTokenIssuedInTheFutureBeyondTheSkewIsRefused() async throws {
        try await expectIDTokenRefused("iat_future", .issuedAtInvalid)
    }

    @Test("oidcc-client-test-invalid-athash") func anIDTokenWhoseAtHashIsAnotherTokensIsRefused() async throws {
        try await expectIDTokenRefused("wrong_at_hash", .accessTokenHashMismatch)
    }

    @Test func anUnknownKidIsRefusedAfterExactlyOneRefetch() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            _ = try await client.completeSignIn(try await provider.callback(for: client))
            #expect(try await provider.count("jwks_requests") == 1)
            try await provider.misbehave(["id_token": "unknown_kid"])
            let query = try await provider.callback(for: client)
            await expectRefusal(.keyUnknown) { _ = try await client.completeSignIn(query) }
            #expect(try await provider.count("jwks_requests") == 2, "one refetch")
            // Another unknown kid within the refetch interval: refused without asking the provider again.
            try await provider.misbehave(["id_token": "unknown_kid"])
            let again = try await provider.callback(for: client)
            await expectRefusal(.keyUnknown) { _ = try await client.completeSignIn(again) }
            #expect(try await provider.count("jwks_requests") == 2, "rate-limited")
        }
    }

    @Test func aFreshClientFetchesTheKeySetOnceForAnUnknownKid() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            try await provider.misbehave(["id_token": "unknown_kid"])
            let query = try await provider.callback(for: client)
            await expectRefusal(.keyUnknown) { _ = try await client.completeSignIn(query) }
            #expect(try await provider.count("jwks_requests") == 1, "the key set just fetched is not fetched again")
        }
    }

    @Test("oidcc-client-test-signing-key-rotation") func rotatedKeysAreAcceptedAfterOneRefetch() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            _ = try await client.completeSignIn(try await provider.callback(for: client))
            try await provider.rotateKeys()
            let signIn = try await client.completeSignIn(try await provider.callback(for: client))
            #expect(signIn.prototype.identifier == "248289761001")
            #expect(try await provider.count("jwks_requests") == 2)
        }
    }

    @Test func aDiscoveryDocumentWithADuplicateMemberIsRefusedByTheStrictReader() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            try await provider.misbehave(["discovery_duplicate": true])
            let error = await expectRefusal(.discoveryFailed) { _ = try await client.providerMetadata() }
            #expect(error?.message.contains("appears twice") == true, "\(error.map { "\($0)" } ?? "")")
            #expect(try await client.providerMetadata().issuer == provider.issuer.absoluteString)
        }
    }

    @Test func aStateUsedTwiceIsRefused() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            let query = try await provider.callback(for: client)
            _ = try await client.completeSignIn(query)
            let tokenRequests = try await provider.count("token_requests")
            await expectRefusal(.stateUnknown) { _ = try await client.completeSignIn(query) }
            #expect(try await provider.count("token_requests") == tokenRequests, "no second exchange")
        }
    }

    @Test func aStateNeverIssuedIsRefused() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            let query = try await provider.callback(for: client)
            // The same callback with the state replaced by one this client never issued.
            let forged = query.rewritingQuery {
                $0.map { $0.hasPrefix("state=") ? "state=never-issued-by-this-client" : $0 }
            }
            await expectRefusal(.stateMismatch) { _ = try await client.completeSignIn(forged) }
            #expect(try await provider.count("token_requests") == 0)
        }
    }

    @Test func anExpiredStateIsRefused() async throws {
        try await OpenIDProviderFixture.with { provider in
            let offset = Locked<TimeInterval>(0)
            let clock = SessionClock.custom { Date().addingTimeInterval(offset.withLock { $0 }) }
            let client = try provider.client(clock: clock)
            let query = try await provider.callback(for: client)
            offset.withLock { $0 = 601 }
            await expectRefusal(.stateUnknown) { _ = try await client.completeSignIn(query) }
        }
    }

    @Test func aReplayedAuthorizationCodeIsRefusedByTheProvider() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            _ = try await client.completeSignIn(try await provider.callback(for: client))
            // The next callback carries the code already redeemed (an attacker injecting a used code).
            try await provider.misbehave(["replay_code": true])
            let query = try await provider.callback(for: client)
            let error = await expectRefusal(.tokenExchangeFailed) {
                _ = try await client.completeSignIn(query)
            }
            #expect(error?.providerErrorCode == "invalid_grant")
            #expect(error?.failureClass == .terminal)
            #expect(try await provider.count("token_errors") == 1)
        }
    }

    @Test func anAccessDeniedCallbackIsATypedErrorWithItsCode() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            try await provider.misbehave(["authorize_error": "access_denied"])
            let redirect = try await client.authorizationRedirect()
            let query = try await provider.logIn(redirect.url)
            let error = await expectRefusal(.authorizationDenied) {
                _ = try await client.completeSignIn(
                    callbackQuery: query, sealedPendingSignIn: redirect.sealedPendingSignIn)
            }
            #expect(error?.providerErrorCode == "access_denied")
        }
    }

    @Test func aCallbackWithAnotherIssuerIsRefusedAsAMixUp() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            try await provider.misbehave(["mixup_iss": true])
            let query = try await provider.callback(for: client)
            await expectRefusal(.callbackIssuerMismatch) { _ = try await client.completeSignIn(query) }
            #expect(try await provider.count("token_requests") == 0, "the code never went to a token endpoint")
        }
    }

    @Test func aCallbackWithoutIssuerIsRefusedWhenTheProviderPromisesOne() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            let query = try await provider.callback(for: client)
            let stripped = query.rewritingQuery { $0.filter { !$0.hasPrefix("iss=") } }
            await expectRefusal(.callbackIssuerMismatch) { _ = try await client.completeSignIn(stripped) }
        }
    }

    @Test func malformedCallbacksAreTypedErrors() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            for query in ["", "code=abc", "state=a&state=b&code=c", "state=%ZZ"] {
                await expectRefusal(.malformedCallback) {
                    _ = try await client.completeSignIn(callbackQuery: query, sealedPendingSignIn: nil)
                }
            }
        }
    }

    @Test func aFullStateStoreDropsItsOldestPendingSignInAndNeverRefusesANewOne() async throws {
        try await OpenIDProviderFixture.with { provider in
            // Each start one second after the previous one, so which one is the oldest is certain.
            let offset = Locked<TimeInterval>(0)
            let clock = SessionClock.custom { Date().addingTimeInterval(offset.withLock { $0 }) }
            let store = InMemoryOpenIDConnectStateStore()
            let client = try provider.client(stateStore: store, clock: clock) {
                $0.maximumPendingSignIns = 2
                $0.pendingSignInStorage = .stateStore
            }
            let oldest = try await provider.callback(for: client)
            offset.withLock { $0 += 1 }
            let second = try await client.authorizationRedirect()
            offset.withLock { $0 += 1 }
            #expect(store.pendingCount == 2, "the bound is full")
            // The same browser starting again replaces its own pending sign-in: still two, the oldest kept.
            _ = try await client.authorizationRedirect(replacing: second.sealedPendingSignIn)
            #expect(store.pendingCount == 2)
            offset.withLock { $0 += 1 }
            // Another browser's start is not refused: it drops the oldest pending sign-in and completes.
            let newest = try await provider.callback(for: client)
            #expect(store.pendingCount == 2)
            let signIn = try await client.completeSignIn(newest)
            #expect(signIn.prototype.identifier == "248289761001")
            await expectRefusal(.stateUnknown) { _ = try await client.completeSignIn(oldest) }
            #expect(store.pendingCount == 1, "only the replacing start is left")
        }
    }
}
#endif
