#if Sealing
import Foundation
import Testing
import UserSessions
import UserSessionsSealing

/// Keys come from the caller and are checked; their material never shows.
struct SealingKeyTests {
    @Test func keysOfTheWrongLengthOrNotBase64AreRefusedWithoutRepeatingTheMaterial() throws {
        let short = Data(repeating: 0x42, count: 16).base64EncodedString()
        for material in [short, "not base64 at all!", ""] {
            do {
                _ = try SealingKey(id: "k", base64: material)
                Issue.record("accepted \(material.count) characters of material")
            } catch let error as UserSessionError {
                #expect(error.code == .invalidConfiguration)
                #expect(material.isEmpty || !error.description.contains(material))
            }
        }
        #expect(throws: UserSessionError(.invalidConfiguration, "")) {
            try SealingKey(id: "k", bytes: Array(repeating: 1, count: 31))
        }
        for id in ["", "with:colon", "with space", String(repeating: "x", count: 65), "caf\u{E9}"] {
            #expect(throws: UserSessionError(.invalidConfiguration, "")) {
                try SealingKey(id: id, bytes: SealingFixtures.materialA)
            }
        }
    }

    @Test func aBase64KeyWithSurroundingWhitespaceIsTheSameKey() async throws {
        let fromBytes = try SealingKey(id: "k", bytes: SealingFixtures.materialA)
        let fromText = try SealingKey(id: "k", base64: " \(SealingFixtures.base64A)\n")
        let writer = SealedTokenStore(
            base: InMemoryTokenStore(), keyRing: try SealingKeyRing(current: fromBytes), namespace: "n")
        try await writer.save(SealingFixtures.session("alice"), identifier: "alice")
        let reader = SealedTokenStore(
            base: writer.base, keyRing: try SealingKeyRing(current: fromText), namespace: "n")
        #expect(try await reader.load(identifier: "alice") == SealingFixtures.session("alice"))
    }

    @Test func aKeyRingRefusesTwoKeysWithOneIdentifier() throws {
        #expect(throws: UserSessionError(.invalidConfiguration, "")) {
            try SealingKeyRing(
                current: SealingKey(id: "k", bytes: SealingFixtures.materialA),
                previous: [SealingKey(id: "k", bytes: SealingFixtures.materialB)])
        }
        let ring = try SealingFixtures.ringBA()
        #expect(ring.keyIDs == ["key-b", "key-a"])
    }

    @Test func aRecordInTheClearIsRefusedAndKept() async throws {
        let base = InMemoryTokenStore()
        try await base.save(SealingFixtures.session("alice"), identifier: "alice")
        let store = SealedTokenStore(base: base, keyRing: try SealingFixtures.ringA(), namespace: "n")
        #expect(await SealingFixtures.problem { _ = try await store.load(identifier: "alice") } == .notSealed)
        #expect(try await base.load(identifier: "alice") == SealingFixtures.session("alice"))
        // A session without credentials has nothing to seal.
        let bare = StoredSession(userInfo: UserInfo(id: "bob"), credentials: nil)
        try await store.save(bare, identifier: "bob")
        #expect(try await store.load(identifier: "bob") == bare)
    }

    @Test func aRecordOfANewerSealedFormatIsAnUnsupportedVersion() async throws {
        let base = InMemoryTokenStore()
        var newer = SealingFixtures.session("alice")
        newer.credentials?.accessToken = "sealed:2:key-a:AAAA"
        try await base.save(newer, identifier: "alice")
        let store = SealedTokenStore(base: base, keyRing: try SealingFixtures.ringA(), namespace: "n")
        await #expect(throws: UserSessionError(.unsupportedFormatVersion, "")) {
            _ = try await store.load(identifier: "alice")
        }
        newer.credentials?.accessToken = "sealed:1:key-a:!!not base64!!"
        try await base.save(newer, identifier: "alice")
        #expect(await SealingFixtures.problem { _ = try await store.load(identifier: "alice") } == .malformed)
    }
}
#endif
