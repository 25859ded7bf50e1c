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
        let signIn = try await client.completeSignIn(try await provider.callback(for: client))
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

    /// What happened when the provider sent a logout to the relying party's back-channel endpoint.
    private struct Delivery {
        var status: Int
        var refusals: [OpenIDConnectError.Code]
        var state: UserSession.State
        var stored: [String]
    }

    /// Signs alice in, starts a receiver serving a ``BackChannelLogoutEndpoint``, asks the provider to send it a
    /// logout token with alice's `sid` and `extra` claims, and reports what followed.
    private func deliverLogout(_ extra: [String: Any] = [:]) async throws -> Delivery {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            return try await withRegistry { registry in
                let signIn = try await client.completeSignIn(try await provider.callback(for: client))
                let controller = try await registry.open(signIn.prototype)
                let claims = extra.merging(["sid": try #require(signIn.claims.sessionID)]) { $1 }
                let endpoint = BackChannelLogoutEndpoint(client: client, registry: registry)
                let status = try await LoopbackHTTPReceiver.run(endpoint.handle) { receiver in
                    let status = try await provider.sendLogout(claims, to: receiver.url("/backchannel-logout"))
                    #expect(receiver.failures.isEmpty, "the provider's POST was a well-formed HTTP request")
                    return status
                }
                return Delivery(
                    status: status, refusals: endpoint.refusals, state: controller.session.state,
                    stored: try await registry.storedIdentifiers())
            }
        }
    }

    @Test("oidcc-client-test-rp-backchannel-rpinitlogout")
    func aLogoutSentByTheProviderToTheBackChannelEndpointClosesTheSession() async throws {
        let delivery = try await deliverLogout()
        #expect(delivery.status == 200)
        #expect(delivery.refusals.isEmpty)
        #expect(delivery.state == .closed)
        #expect(delivery.stored.isEmpty)
    }

    @Test func aBadLogoutTokenSentByTheProviderIsAnswered400AndSignsNobodyOut() async throws {
        let delivery = try await deliverLogout(["fault": "nonce"])
        #expect(delivery.status == 400)
        #expect(delivery.refusals == [.invalidLogoutToken])
        #expect(delivery.state == .opened)
        #expect(delivery.stored == ["248289761001"])
    }

    @Test func theProviderRefusesToSendALogoutOutsideTheLoopback() async throws {
        try await OpenIDProviderFixture.with { provider in
            let status = try await provider.control(
                "/control/send-logout", ["sid": "any", "uri": "http://example.com/backchannel-logout"],
                expecting: 400)
            #expect(status["error"] as? String == "uri must be a loopback http URL")
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

    @Test("oidcc-client-test-rp-backchannel-rpinitlogout-with-nonce") func aLogoutTokenWithANonceIsRefused()
        async throws
    {
        try await expectLogoutRefused(["sid": "current", "fault": "nonce"], .invalidLogoutToken)
    }

    @Test("oidcc-client-test-rp-backchannel-rpinitlogout-no-event") func aLogoutTokenWithoutTheLogoutEventIsRefused()
        async throws
    {
        try await expectLogoutRefused(["sid": "current", "fault": "no_event"], .invalidLogoutToken)
    }

    @Test func aLogoutTokenWithNeitherSubNorSidIsRefused() async throws {
        try await expectLogoutRefused(["fault": "no_sub_or_sid"], .invalidLogoutToken)
    }

    @Test("oidcc-client-test-rp-backchannel-rpinitlogout-wrong-aud") func aLogoutTokenForAnotherAudienceIsRefused()
        async throws
    {
        try await expectLogoutRefused(["sid": "current", "fault": "wrong_aud"], .audienceMismatch)
    }

    @Test("oidcc-client-test-rp-backchannel-rpinitlogout-alg-none") func anUnsignedLogoutTokenIsRefused() async throws {
        try await expectLogoutRefused(["sid": "current", "fault": "alg_none"], .algorithmRefused)
    }

    @Test func aLogoutTokenForAnUnknownUserIsRefused() async throws {
        try await expectLogoutRefused(["sub": "nobody-we-know"], .unknownSession)
    }

    @Test func anIDTokenIsNotALogoutToken() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            try await withRegistry { registry in
                let signIn = try await client.completeSignIn(try await provider.callback(for: client))
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

/// A back-channel logout endpoint as a relying party writes it: reads `logout_token` from the form body of a POST to
/// `/backchannel-logout`, hands it to the client, answers 200 when it signed out and 400 on an
/// ``OpenIDConnectError`` (whose code it records) or a request without the token.
private final class BackChannelLogoutEndpoint: Sendable {
    let client: OpenIDConnectClient
    let registry: UserSessionRegistry
    private let refused = Locked<[OpenIDConnectError.Code]>([])

    init(client: OpenIDConnectClient, registry: UserSessionRegistry) {
        self.client = client
        self.registry = registry
    }

    /// The codes of the logout tokens refused, in order.
    var refusals: [OpenIDConnectError.Code] { refused.withLock { $0 } }

    @Sendable func handle(_ request: LoopbackHTTPReceiver.Request) async -> Int {
        var form = URLComponents()
        form.percentEncodedQuery = String(decoding: request.body, as: UTF8.self).replacing("+", with: "%20")
        guard request.method == "POST", request.path == "/backchannel-logout",
            let token = form.queryItems?.first(where: { $0.name == "logout_token" })?.value
        else { return 400 }
        do {
            try await client.handleBackChannelLogout(logoutToken: token, registry: registry)
            return 200
        } catch  where error.code == .signOutFailed || error.code == .storeFailure {
            return 503
        } catch {
            refused.withLock { $0.append(error.code) }
            return 400
        }
    }
}
#endif
