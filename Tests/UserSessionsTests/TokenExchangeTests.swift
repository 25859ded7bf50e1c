import Foundation
import Testing

@testable import UserSessions

/// `ClientCredentialsTokenManager.exchangedToken` against the fixture's RFC 8693 token exchange: cached per user and
/// audience, dropped when the user signs out.
struct TokenExchangeTests {
    static let secret = "cc-secret"

    struct Rig {
        let server: OAuthFixtureServer
        let time: ManualTime
        let tokens: ClientCredentialsTokenManager
        let registry: UserSessionRegistry
        let probe: ClientTokenProbe

        /// Signs `user` in with a new token family of the server.
        func signIn(_ user: String) async throws -> UserSessionController {
            let (refreshToken, accessToken) = try await server.issue()
            let credentials = Credentials(
                accessToken: accessToken, refreshToken: refreshToken, expiresAt: time.now.addingTimeInterval(3600))
            return try await registry.open(UserSessionPrototype(userInfo: UserInfo(id: user), credentials: credentials))
        }
    }

    static func withRig(_ body: (Rig) async throws -> Void) async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let probe = ClientTokenProbe()
            let tokens = try ClientCredentialsTokenManager(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: Self.secret),
                configuration: .init(clock: time.clock, observers: [probe]))
            var configuration = UserSessionController.Configuration(clock: time.clock, revokesOnSignOut: false)
            configuration.observers = [tokens.signOutObserver]
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: Self.secret), clock: time.clock)
            let registry = UserSessionRegistry(
                store: InMemoryTokenStore(), refresher: refresher, configuration: configuration)
            try await body(Rig(server: server, time: time, tokens: tokens, registry: registry, probe: probe))
            await registry.shutdown()
        }
    }

    @Test func anExchangedTokenIsCachedPerUserAndAudience() async throws {
        try await Self.withRig { rig in
            let alice = try await rig.signIn("alice")
            let bob = try await rig.signIn("bob")
            let billing = try await rig.tokens.exchangedToken(for: alice, audience: "https://billing.test")
            #expect(billing.hasPrefix("tx-"))
            #expect(try await rig.server.stats().lastAudience == "https://billing.test")
            #expect(try await rig.tokens.exchangedToken(for: alice, audience: "https://billing.test") == billing)
            let shipping = try await rig.tokens.exchangedToken(for: alice, audience: "https://shipping.test")
            let bobs = try await rig.tokens.exchangedToken(for: bob, audience: "https://billing.test")
            #expect(Set([billing, shipping, bobs]).count == 3)
            #expect(try await rig.server.stats().tokenExchanges == 3)
            // Never the server's own client-credentials token for the same scopes.
            #expect(try await rig.tokens.accessToken() != billing)
        }
    }

    @Test func manyCallersForOneUserAndAudienceCauseOneExchange() async throws {
        try await Self.withRig { rig in
            let alice = try await rig.signIn("alice")
            let tokens = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<1_000 {
                    group.addTask { try await rig.tokens.exchangedToken(for: alice, audience: "https://billing.test") }
                }
                return try await group.reduce(into: Set<String>()) { $0.insert($1) }
            }
            #expect(tokens.count == 1)
            #expect(try await rig.server.stats().tokenExchanges == 1)
            rig.time.advance(by: 3601 - 60)
            // The user's own token is refreshed, then exchanged once more.
            _ = try await rig.tokens.exchangedToken(for: alice, audience: "https://billing.test")
            #expect(try await rig.server.stats().tokenExchanges == 2)
        }
    }

    @Test func signingOutDropsTheUsersExchangedTokensAndNoOneElses() async throws {
        try await Self.withRig { rig in
            let alice = try await rig.signIn("alice")
            let bob = try await rig.signIn("bob")
            let alices = try await rig.tokens.exchangedToken(for: alice, audience: "https://billing.test")
            let bobs = try await rig.tokens.exchangedToken(for: bob, audience: "https://billing.test")
            try await rig.registry.closeAndClear(identifier: "alice")
            #expect(rig.probe.events.contains { $0.kind == .forgotten && $0.subject == "alice" })
            #expect(!rig.probe.events.contains { $0.kind == .forgotten && $0.subject == "bob" })
            let error = await #expect(throws: UserSessionError.self) {
                try await rig.tokens.exchangedToken(for: alice, audience: "https://billing.test")
            }
            #expect(error?.code == .sessionNotOpen)
            #expect(try await rig.tokens.exchangedToken(for: bob, audience: "https://billing.test") == bobs)
            // Signed in again, alice gets a new exchange, never the dropped token.
            let again = try await rig.signIn("alice")
            let fresh = try await rig.tokens.exchangedToken(for: again, audience: "https://billing.test")
            #expect(fresh != alices)
            #expect(try await rig.server.stats().tokenExchanges == 3)
        }
    }

    @Test func anExchangeInFlightWhenTheUserSignsOutIsNotKept() async throws {
        try await Self.withRig { rig in
            let alice = try await rig.signIn("alice")
            try await rig.server.hold()
            let waiter = Task { try await rig.tokens.exchangedToken(for: alice, audience: "https://billing.test") }
            while try await rig.server.stats().heldRequests < 1 { await Task.yield() }
            try await rig.registry.closeAndClear(identifier: "alice")
            try await rig.server.release()
            let error = await #expect(throws: UserSessionError.self) { try await waiter.value }
            #expect(error?.code == .sessionNotOpen)
            let again = try await rig.signIn("alice")
            _ = try await rig.tokens.exchangedToken(for: again, audience: "https://billing.test")
            #expect(try await rig.server.stats().tokenExchanges == 2)
        }
    }

    @Test func aRefusedSubjectTokenIsAMisconfigurationOfThatRequestNotOfTheKey() async throws {
        try await Self.withRig { rig in
            let alice = try await rig.signIn("alice")
            try await rig.server.revokeAll()
            let error = await #expect(throws: UserSessionError.self) {
                try await rig.tokens.exchangedToken(for: alice, audience: "https://billing.test")
            }
            #expect(error?.code == .tokenRequestFailed)
            #expect(error?.failureClass == .misconfiguration)
            let empty = await #expect(throws: UserSessionError.self) {
                try await rig.tokens.exchangedToken(for: alice, audience: "")
            }
            #expect(empty?.code == .invalidTokenRequest)
        }
    }
}
