#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

@Suite(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
struct BackChannelLogoutTests {
    /// Signs alice in through `client`, opens her session in `registry`, and returns the ID token's claims.
    private func signInAlice(
        _ provider: OpenIDProviderFixture, _ client: OpenIDConnectClient, _ registry: UserSessionRegistry
    ) async throws -> OpenIDClaims {
        let signIn = try await client.completeSignIn(callbackQuery: try await provider.callback(for: client))
        _ = try await registry.open(signIn.prototype)
        return signIn.claims
    }

    @Test func aLogoutTokenWithTheSessionIDSignsTheUserOut() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            try await withRegistry { registry in
                let claims = try await signInAlice(provider, client, registry)
                let sid = try #require(claims.sessionID)
                let token = try await provider.logoutToken(["sid": sid])
                let signedOut = try await client.handleBackChannelLogout(logoutToken: token, registry: registry)
                #expect(signedOut == ["248289761001"])
                #expect(try await registry.storedIdentifiers().isEmpty)
            }
        }
    }

    @Test func aLogoutTokenWithOnlyTheSubjectSignsTheUserOut() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            try await withRegistry { registry in
                _ = try await signInAlice(provider, client, registry)
                let token = try await provider.logoutToken(["sub": "248289761001"])
                #expect(try await client.handleBackChannelLogout(logoutToken: token, registry: registry).count == 1)
                #expect(try await registry.storedIdentifiers().isEmpty)
            }
        }
    }

    /// Sends a logout token minted with `claims` and expects `code`, with alice still signed in.
    private func expectLogoutRefused(
        _ claims: [String: Any], _ code: OpenIDConnectError.Code, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            try await withRegistry { registry in
                let signedIn = try await signInAlice(provider, client, registry)
                var claims = claims
                if claims["sid"] as? String == "current" { claims["sid"] = signedIn.sessionID }
                let token = try await provider.logoutToken(claims)
                await expectRefusal(code, sourceLocation: sourceLocation) {
                    try await client.handleBackChannelLogout(logoutToken: token, registry: registry)
                }
                #expect(
                    try await registry.storedIdentifiers() == ["248289761001"], "nobody signed out",
                    sourceLocation: sourceLocation)
            }
        }
    }

    @Test func aLogoutTokenWithANonceIsRefused() async throws {
        try await expectLogoutRefused(["sid": "current", "fault": "nonce"], .invalidLogoutToken)
    }

    @Test func aLogoutTokenWithoutTheLogoutEventIsRefused() async throws {
        try await expectLogoutRefused(["sid": "current", "fault": "no_event"], .invalidLogoutToken)
    }

    @Test func aLogoutTokenWithNeitherSubNorSidIsRefused() async throws {
        try await expectLogoutRefused(["fault": "no_sub_or_sid"], .invalidLogoutToken)
    }

    @Test func aLogoutTokenForAnotherAudienceIsRefused() async throws {
        try await expectLogoutRefused(["sid": "current", "fault": "wrong_aud"], .audienceMismatch)
    }

    @Test func anUnsignedLogoutTokenIsRefused() async throws {
        try await expectLogoutRefused(["sid": "current", "fault": "alg_none"], .algorithmRefused)
    }

    @Test func aLogoutTokenForAnUnknownUserIsRefused() async throws {
        try await expectLogoutRefused(["sub": "nobody-we-know"], .unknownSession)
    }

    @Test func anIDTokenIsNotALogoutToken() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            try await withRegistry { registry in
                let signIn = try await client.completeSignIn(callbackQuery: try await provider.callback(for: client))
                _ = try await registry.open(signIn.prototype)
                let idToken = try #require(signIn.prototype.credentials?.idToken)
                await expectRefusal(.invalidLogoutToken) {
                    try await client.handleBackChannelLogout(logoutToken: idToken, registry: registry)
                }
                #expect(try await registry.storedIdentifiers().count == 1)
            }
        }
    }

    @Test func aReplayedLogoutTokenIsRefused() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            try await withRegistry { registry in
                let claims = try await signInAlice(provider, client, registry)
                let token = try await provider.logoutToken(["sid": try #require(claims.sessionID), "jti": "once"])
                _ = try await client.handleBackChannelLogout(logoutToken: token, registry: registry)
                // Alice signs in again; the same logout token, replayed, must not sign her out.
                let again = try await signInAlice(provider, client, registry)
                let replay = try await provider.logoutToken(["sid": try #require(again.sessionID), "jti": "once"])
                await expectRefusal(.logoutTokenReplayed) {
                    try await client.handleBackChannelLogout(logoutToken: replay, registry: registry)
                }
                #expect(try await registry.storedIdentifiers() == ["248289761001"])
            }
        }
    }
}
#endif
