#if Sealing
import Foundation
import Testing
import UserSessions
import UserSessionsSealing
import UserSessionsTestSupport

/// A ``SealedTokenStore`` over a ``RemoteTokenStore`` talking to the real token-cache endpoint fixture (a python3
/// server on 127.0.0.1) whose data files are in a directory of the test's own.
struct SealedRemoteStoreTests {
    static func withSealedCache<Value>(
        _ ring: SealingKeyRing, _ body: (SealedTokenStore<RemoteTokenStore>, URL) async throws -> Value
    ) async throws -> Value {
        let storage = try SealingFixtures.temporaryDirectory("cache")
        defer { try? FileManager.default.removeItem(at: storage) }
        return try await FixtureServer.run(
            script: "token_cache_server.py", arguments: ["--storage", storage.path(percentEncoded: false)]
        ) { server in
            let remote = try RemoteTokenStore(endpoint: server.url("/token_cache"))
            return try await body(SealedTokenStore(base: remote, keyRing: ring, namespace: "tests"), storage)
        }
    }

    @Test func theEndpointsDataFilesHoldNoTokenNorAnyEightBytePieceOfOne() async throws {
        try await Self.withSealedCache(try SealingFixtures.ringA()) { store, storage in
            let sessions = ["alice", "bob"].map(SealingFixtures.session)
            for session in sessions { try await store.save(session, identifier: session.userInfo.id) }
            for session in sessions {
                // Exactly what was saved, though the protocol's dates keep only milliseconds in the clear part.
                #expect(try await store.load(identifier: session.userInfo.id) == session)
            }
            let files = try SealingFixtures.rawFiles(under: storage)
            #expect(files.count == 2)
            let secrets = SealingFixtures.secrets(of: sessions)
            for (url, bytes) in files {
                #expect(SecretScan.leaked(secrets, in: bytes).isEmpty, "\(url.lastPathComponent) leaks a secret")
                #expect(String(decoding: bytes, as: UTF8.self).contains("sealed:1:key-a:"))
            }
        }
    }

    @Test func aDataFileCopiedToAnotherUsersRecordIsRefused() async throws {
        try await Self.withSealedCache(try SealingFixtures.ringA()) { store, storage in
            try await store.save(SealingFixtures.session("alice"), identifier: "alice")
            try await store.save(SealingFixtures.session("bob"), identifier: "bob")
            let files = try SealingFixtures.rawFiles(under: storage)
            let alices = try #require(files.first { $0.key.lastPathComponent.contains("alice") })
            let bobs = try #require(files.first { $0.key.lastPathComponent.contains("bob") })
            // The attacker's copy, on the endpoint's disk: alice's file in bob's, with the identifier the store
            // records in the clear edited to bob's (a plain copy is already refused by the remote store).
            let copy = try #require(try JSONSerialization.jsonObject(with: Data(alices.value)) as? [String: Any])
            let edited = try JSONSerialization.data(withJSONObject: copy.merging(["identifier": "bob"]) { $1 })
            try edited.write(to: bobs.key)
            #expect(
                await SealingFixtures.problem { _ = try await store.load(identifier: "bob") } == .authenticationFailed)
            #expect(try Data(contentsOf: bobs.key) == edited, "the record is kept")
            #expect(try await store.load(identifier: "alice") == SealingFixtures.session("alice"))
        }
    }

    @Test func aFlippedBitAndAMissingKeyAreRefused() async throws {
        try await Self.withSealedCache(try SealingFixtures.ringA()) { store, _ in
            try await store.save(SealingFixtures.session("alice"), identifier: "alice")
            let withoutA = SealedTokenStore(base: store.base, keyRing: try SealingFixtures.ringB(), namespace: "tests")
            #expect(
                await SealingFixtures.problem { _ = try await withoutA.load(identifier: "alice") }
                    == .unknownKey(id: "key-a"))
            let raw = try #require(try await store.base.load(identifier: "alice"))
            try await store.base.save(try SealingFixtures.flippingABit(in: raw), identifier: "alice")
            #expect(
                await SealingFixtures.problem { _ = try await store.load(identifier: "alice") } == .authenticationFailed
            )
            #expect(try await store.base.load(identifier: "alice") != nil, "the record is kept")
        }
    }

    @Test func afterARotationRecordsLoadAndTheNextWriteSealsWithTheNewKey() async throws {
        try await Self.withSealedCache(try SealingFixtures.ringA()) { store, _ in
            try await store.save(SealingFixtures.session("alice"), identifier: "alice")
            let rotated = SealedTokenStore(base: store.base, keyRing: try SealingFixtures.ringBA(), namespace: "tests")
            #expect(try await rotated.load(identifier: "alice") == SealingFixtures.session("alice"))
            try await rotated.save(SealingFixtures.session("alice"), identifier: "alice")
            #expect(SealingFixtures.keyID(of: try await store.base.load(identifier: "alice")) == "key-b")
            // The remote protocol cannot list records, so resealAll says so instead of reporting nothing to do.
            await #expect(throws: UserSessionError(.storeFailure, "")) { _ = try await rotated.resealAll() }
        }
    }
}
#endif
