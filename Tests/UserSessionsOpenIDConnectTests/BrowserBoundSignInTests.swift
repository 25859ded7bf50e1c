#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

/// A sign-in completes only in the browser that started it, and pending sign-ins cost the server nothing: the
/// pending state lives sealed in the browser (issue 26, items 1 and 2).
@Suite(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
struct BrowserBoundSignInTests {
    @Test func aCallbackOpenedInAnotherBrowserCompletesNothing() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            // The attacker signs in in their own browser and stops at the redirect back (the code unused)…
            let attackers = try await provider.callback(for: client)
            // …and the victim's browser opens that URL: with no pending sign-in of its own, or with its own one.
            await expectRefusal(.pendingSignInMissing) {
                _ = try await client.completeSignIn(callbackQuery: attackers.query, sealedPendingSignIn: nil)
            }
            let victims = try await client.authorizationRedirect()
            await expectRefusal(.stateMismatch) {
                _ = try await client.completeSignIn(
                    callbackQuery: attackers.query, sealedPendingSignIn: victims.sealedPendingSignIn)
            }
            #expect(try await provider.count("token_requests") == 0, "the attacker's code never reached the provider")
            // The attacker's own browser still completes its sign-in.
            let signIn = try await client.completeSignIn(attackers)
            #expect(signIn.prototype.identifier == "248289761001")
        }
    }

    @Test func aSealedPendingSignInOpensOnlyWithTheClientsKeys() async throws {
        try await OpenIDProviderFixture.with { provider in
            let client = try provider.client()
            let other = try provider.client()  // another random key
            let callback = try await provider.callback(for: client)
            await expectRefusal(.pendingSignInUnreadable) { _ = try await other.completeSignIn(callback) }
            let sealed = try #require(callback.sealed)
            // One character changed in the middle: always other bytes, which the seal refuses.
            var characters = Array(sealed)
            let middle = characters.count / 2
            characters[middle] = characters[middle] == "A" ? "B" : "A"
            // The same bytes spelled another way: the last character with an unused bit set (the length leaves
            // 2 or 4 unused bits unless it is a multiple of 4, when the first spelling is the only one).
            var respelled = Array(sealed)
            let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
            if (respelled.count - "p1.".count) % 4 != 0, let index = alphabet.firstIndex(of: respelled.last!) {
                respelled[respelled.count - 1] = alphabet[index | 1]
            }
            for tampered in [String(characters), String(respelled)] where tampered != sealed {
                await expectRefusal(.pendingSignInUnreadable) {
                    _ = try await client.completeSignIn(callbackQuery: callback.query, sealedPendingSignIn: tampered)
                }
            }
            #expect(try await provider.count("token_requests") == 0)
            _ = try await client.completeSignIn(callback)
        }
    }

    @Test func aPendingSignInSealedWithAPreviousKeyStillCompletes() async throws {
        try await OpenIDProviderFixture.with { provider in
            let before = try provider.client { $0.pendingSignInKeys = FleetKeys.make(1) }
            let after = try provider.client { $0.pendingSignInKeys = FleetKeys.make(2, previous: [1]) }
            let callback = try await provider.callback(for: before)
            #expect(try await after.completeSignIn(callback).prototype.identifier == "248289761001")
            await expectRefusal(.invalidConfiguration) { _ = try PendingSignInKeys(current: Data(count: 16)) }
        }
    }

    @Test func aCallbackOnAnotherInstanceCompletesWithTheSameKeysAndNoSharedStore() async throws {
        try await OpenIDProviderFixture.with { provider in
            let first = try provider.client(configure: FleetKeys.inBrowser)
            let second = try provider.client(configure: FleetKeys.inBrowser)
            let callback = try await provider.callback(for: first)
            #expect(try await second.completeSignIn(callback).prototype.identifier == "248289761001")
            // Replayed on the instance that completed it: refused before the provider is asked.
            let tokenRequests = try await provider.count("token_requests")
            await expectRefusal(.stateUnknown) { _ = try await second.completeSignIn(callback) }
            #expect(try await provider.count("token_requests") == tokenRequests)
        }
    }

    @Test func anExpiredSealedPendingSignInIsRefused() async throws {
        try await OpenIDProviderFixture.with { provider in
            let offset = Locked<TimeInterval>(0)
            let clock = SessionClock.custom { Date().addingTimeInterval(offset.withLock { $0 }) }
            let client = try provider.client(clock: clock)
            let callback = try await provider.callback(for: client)
            offset.withLock { $0 = 601 }
            await expectRefusal(.stateUnknown) { _ = try await client.completeSignIn(callback) }
        }
    }

    @Test func tenThousandStartedSignInsKeepNothingOnTheServer() async throws {
        try await OpenIDProviderFixture.with { provider in
            let store = InMemoryOpenIDConnectStateStore()
            let client = try provider.client(stateStore: store)
            var cookieBytes = 0
            for _ in 0..<10_000 {
                let redirect = try await client.authorizationRedirect(AuthorizationOptions(context: ["returnTo": "/"]))
                cookieBytes = max(cookieBytes, redirect.sealedPendingSignIn.utf8.count)
            }
            #expect(store.pendingCount == 0, "no pending sign-in is kept on the server")
            #expect(cookieBytes < 1_024, "the sealed pending sign-in fits a cookie easily (\(cookieBytes) bytes)")
            // A real user signs in all the same.
            #expect(
                try await client.completeSignIn(provider.callback(for: client)).prototype.identifier == "248289761001")
        }
    }

    @Test func withTheStateStoreABrowsersNewSignInReplacesItsEarlierOne() async throws {
        try await OpenIDProviderFixture.with { provider in
            let store = InMemoryOpenIDConnectStateStore()
            let client = try provider.client(stateStore: store) { $0.pendingSignInStorage = .stateStore }
            var cookie: String?
            for _ in 0..<50 {
                cookie = try await client.authorizationRedirect(replacing: cookie).sealedPendingSignIn
            }
            #expect(store.pendingCount == 1, "one browser holds one pending sign-in in the store")
            let callback = try await provider.callback(for: client)
            #expect(store.pendingCount == 2)
            _ = try await client.completeSignIn(callback)
            #expect(store.pendingCount == 1, "consumed")
            await expectRefusal(.stateUnknown) { _ = try await client.completeSignIn(callback) }
        }
    }
}
#endif
