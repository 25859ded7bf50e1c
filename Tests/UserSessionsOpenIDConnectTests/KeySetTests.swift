#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

/// The provider's keys: a forged-`kid` flood costs the provider at most one JWKS fetch per refetch interval and
/// never keeps a genuine rotation out for longer than one interval; tokens without `kid` are checked against every
/// key that fits their algorithm (issue 26, items 3 and 4).
@Suite(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
struct KeySetTests {
    /// A token whose header names the key `kid`, which the provider never had: what anyone can post to the public
    /// back-channel logout route.
    static func forgedToken(kid: String) -> String {
        func encode(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        return encode(#"{"alg":"RS256","kid":"\#(kid)"}"#) + "." + encode(#"{"sub":"x"}"#) + ".AAAA"
    }

    @Test func aGenuineRotationIsAcceptedOneIntervalAfterAForgedKidFlood() async throws {
        try await OpenIDProviderFixture.with { provider in
            // The client's clock stands still but for the test's moves (the provider's tokens are minted on the real
            // clock, well within the allowed skew).
            let start = Date()
            let offset = Locked<TimeInterval>(0)
            let clock = SessionClock.custom { start.addingTimeInterval(offset.withLock { $0 }) }
            let client = try provider.client(clock: clock)
            #expect(client.configuration.keySetRefetchInterval == .seconds(5), "the documented default")
            _ = try await client.completeSignIn(try await provider.callback(for: client))
            #expect(try await provider.count("jwks_requests") == 1)
            try await withRegistry { registry in
                // 1,000 forged kids at once: one refetch, every other one refused without asking the provider.
                for index in 0..<1_000 {
                    let error = await expectRefusal(.keyUnknown) {
                        _ = try await client.handleBackChannelLogout(
                            logoutToken: Self.forgedToken(kid: "forged-\(index)"), registry: registry)
                    }
                    if index > 0 { #expect(error?.failureClass == .transient, "refused until the interval passes") }
                }
                #expect(try await provider.count("jwks_requests") == 2, "one fetch for the whole flood")
                // The provider rotates its keys right after the flood: within the interval, the new key waits…
                try await provider.rotateKeys()
                offset.withLock { $0 = 4.9 }
                let early = try await provider.callback(for: client)
                let error = await expectRefusal(.keyUnknown) { _ = try await client.completeSignIn(early) }
                #expect(error?.failureClass == .transient)
                #expect(try await provider.count("jwks_requests") == 2)
                // …and one interval after the flood's refetch the first genuine token brings it in.
                offset.withLock { $0 = 5 }
                let signIn = try await client.completeSignIn(try await provider.callback(for: client))
                #expect(signIn.prototype.identifier == "248289761001")
                #expect(try await provider.count("jwks_requests") == 3)
                // The flood goes on: still at most one fetch per interval.
                for second in 0...20 {
                    offset.withLock { $0 = 5 + Double(second) * 0.5 }
                    for index in 0..<50 {
                        await expectRefusal(.keyUnknown) {
                            _ = try await client.handleBackChannelLogout(
                                logoutToken: Self.forgedToken(kid: "more-\(second)-\(index)"), registry: registry)
                        }
                    }
                }
                // 1,050 more forged tokens over 10 s of the client's clock: fetches at 10 s and 15 s only.
                #expect(try await provider.count("jwks_requests") == 5)
            }
        }
    }

    @Test("oidcc-client-test-kid-absent-single-jwks") func aTokenWithoutKidIsCheckedWithTheOneKeyOfItsAlgorithm()
        async throws
    {
        try await OpenIDProviderFixture.with { provider in
            _ = try await provider.control("/control/without-kid", ["decoys": 0])
            let client = try provider.client()
            #expect(
                try await client.completeSignIn(provider.callback(for: client)).prototype.identifier == "248289761001")
        }
    }

    @Test("oidcc-client-test-kid-absent-multiple-jwks") func aTokenWithoutKidIsCheckedWithEveryKeyOfItsAlgorithm()
        async throws
    {
        try await OpenIDProviderFixture.with { provider in
            // Two other RSA keys come first in the key set; the token names none.
            _ = try await provider.control("/control/without-kid", ["decoys": 2])
            let client = try provider.client()
            #expect(
                try await client.completeSignIn(provider.callback(for: client)).prototype.identifier == "248289761001")
            // A token no key of the set signed is still refused.
            try await provider.misbehave(["id_token": "unknown_kid"])
            let forged = try await provider.callback(for: client)
            await expectRefusal(.keyUnknown) { _ = try await client.completeSignIn(forged) }
        }
    }
}
#endif
