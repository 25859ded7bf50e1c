#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

/// `signOut` tells a provider without logout from an outage, back-channel logout's errors are typed and say what
/// happened, and the post-logout `state` can be checked (issue 26, item 6).
struct SignOutTests {
    /// A client of a provider described by hand, with or without an end-session endpoint; never contacted.
    static func client(endSession: Bool) throws -> OpenIDConnectClient {
        let base = try #require(URL(string: "http://127.0.0.1:9"))
        return try OpenIDConnectClient(
            provider: OpenIDProviderMetadata(
                issuer: base.absoluteString, authorizationEndpoint: base.appending(path: "authorize"),
                tokenEndpoint: base.appending(path: "token"), jwksURI: base.appending(path: "jwks"),
                endSessionEndpoint: endSession ? base.appending(path: "logout") : nil),
            configuration: OpenIDConnectConfiguration(
                clientAuthentication: .publicClient(id: "app"), redirectURI: OpenIDProviderFixture.redirectURI))
    }

    static let alice = UserSessionPrototype(
        identifier: "alice", userInfo: UserInfo(id: "alice"),
        credentials: Credentials(accessToken: "token", idToken: "id-token"))

    @Test func signOutSaysWhetherTheProviderOffersALogout() async throws {
        try await withRegistry { registry in
            _ = try await registry.open(Self.alice)
            let logout = try await Self.client(endSession: true).signOut(
                identifier: "alice", registry: registry,
                postLogoutRedirectURI: OpenIDProviderFixture.postLogoutRedirectURI,
                state: "s")
            let url = try #require(logout.url)
            #expect(url.path == "/logout")
            #expect(url.query?.contains("id_token_hint=id-token") == true && url.query?.contains("state=s") == true)
            #expect(try await registry.storedIdentifiers().isEmpty)

            _ = try await registry.open(Self.alice)
            #expect(
                try await Self.client(endSession: false).signOut(identifier: "alice", registry: registry) == .notOffered
            )
            #expect(try await registry.storedIdentifiers().isEmpty, "signed out locally all the same")
        }
    }

    @Test func signOutReportsAnOutageOfTheProviderApartFromNoLogout() async throws {
        try await withRegistry { registry in
            _ = try await registry.open(Self.alice)
            // Discovery at a port where nothing listens: the URL cannot be made, the local sign-out happens.
            let client = try OpenIDConnectClient(
                issuer: try #require(URL(string: "http://127.0.0.1:9")),
                configuration: OpenIDConnectConfiguration(
                    clientAuthentication: .publicClient(id: "app"), redirectURI: OpenIDProviderFixture.redirectURI,
                    requestTimeout: .seconds(5)))
            let logout = try await client.signOut(identifier: "alice", registry: registry)
            guard case .unavailable(let error) = logout else {
                Issue.record("expected .unavailable, got \(logout)")
                return
            }
            #expect(error.code == .discoveryFailed)
            #expect(logout.url == nil)
            #expect(try await registry.storedIdentifiers().isEmpty)
        }
    }

    @Test func signOutThrowsATypedErrorWhenTheLocalSignOutFails() async throws {
        let registry = UserSessionRegistry(store: FailingRemoveStore())
        _ = try await registry.open(Self.alice)
        let error = await expectRefusal(.signOutFailed) {
            _ = try await Self.client(endSession: true).signOut(identifier: "alice", registry: registry)
        }
        #expect(error?.underlying is UserSessionError)
        await registry.shutdown()
    }

    @Test(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
    func aBackChannelLogoutWhoseLocalSignOutFailsThrowsSignOutFailed() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            let signIn = try await client.completeSignIn(try await provider.callback(for: client))
            let registry = UserSessionRegistry(store: FailingRemoveStore())
            _ = try await registry.open(signIn.prototype)
            let token = try await provider.logoutToken(["sid": try #require(signIn.claims.sessionID)])
            let error = await expectRefusal(.signOutFailed) {
                try await client.handleBackChannelLogout(logoutToken: token, registry: registry)
            }
            #expect(error?.failureClass == .transient)
            #expect(error?.underlying is UserSessionError)
            // A refusal of the token signs nobody out and says so with its own code.
            let forged = try await provider.logoutToken(["sid": "other", "fault": "wrong_aud"])
            await expectRefusal(.audienceMismatch) {
                try await client.handleBackChannelLogout(logoutToken: forged, registry: registry)
            }
            await registry.shutdown()
        }
    }

    @Test("oidcc-client-test-rp-init-logout-other-state")
    func thePostLogoutStateIsCheckedInConstantTimeAgainstTheOneSent() throws {
        let state = PostLogoutState.make()
        #expect(state.count == 43)
        #expect(state != PostLogoutState.make())
        try PostLogoutState.check(returned: state, expected: state)
        for (returned, expected) in [(nil, state), (state, nil), ("", ""), (state, PostLogoutState.make())] {
            #expect(throws: OpenIDConnectError.self) {
                try PostLogoutState.check(returned: returned, expected: expected)
            }
        }
    }
}

/// A token store whose `remove` always fails (a disk or database outage at sign-out).
struct FailingRemoveStore: ForwardingTokenStore {
    let base = InMemoryTokenStore()
    var forwardedTo: any TokenStore { base }

    func remove(identifier: String) async throws {
        throw UserSessionError(.storeFailure, "scripted remove failure", failureClass: .transient)
    }
}
#endif
