#if Sealing
import Foundation
import Testing
import UserSessions
import UserSessionsSealing
import UserSessionsTestSupport

/// A ``SealedTokenStore`` over real files of a ``FileTokenStore``: what is on disk, rotation, and the records that
/// must not open.
struct SealedFileStoreTests {
    static func withDirectory<Value>(_ body: (URL) async throws -> Value) async throws -> Value {
        let directory = try SealingFixtures.temporaryDirectory("file")
        defer { try? FileManager.default.removeItem(at: directory) }
        return try await body(directory)
    }

    static func sealed(_ directory: URL, _ ring: SealingKeyRing) -> SealedTokenStore<FileTokenStore> {
        SealedTokenStore(base: FileTokenStore(directory: directory), keyRing: ring, namespace: "tests")
    }

    @Test func passesTheTokenStoreConformanceChecks() async throws {
        try await Self.withDirectory { directory in
            try await TokenStoreConformance.check(Self.sealed(directory, try SealingFixtures.ringA()))
        }
        try await TokenStoreConformance.check(
            SealedTokenStore(base: InMemoryTokenStore(), keyRing: try SealingFixtures.ringA(), namespace: "tests"))
    }

    @Test func filesHoldNoTokenNorAnyEightBytePieceOfOne() async throws {
        try await Self.withDirectory { directory in
            let store = Self.sealed(directory, try SealingFixtures.ringA())
            let sessions = ["alice", "bob", "carol"].map(SealingFixtures.session)
            for session in sessions { try await store.save(session, identifier: session.userInfo.id) }
            try await store.saveCurrentIdentifier("alice")
            for session in sessions {
                #expect(try await store.load(identifier: session.userInfo.id) == session, "loads back exactly")
            }
            let files = try SealingFixtures.rawFiles(under: directory)
            #expect(files.count >= 3)
            let secrets = SealingFixtures.secrets(of: sessions)
            #expect(secrets.count >= sessions.count * 2 + 2, "both tokens of every session, and the keys")
            for (url, bytes) in files {
                #expect(SecretScan.leaked(secrets, in: bytes).isEmpty, "\(url.lastPathComponent) leaks a secret")
            }
            // What a store needs in the clear stays readable: the identifier, the user, the expiry.
            let clear = try #require(try await store.base.load(identifier: "alice"))
            #expect(clear.userInfo == sessions[0].userInfo)
            #expect(clear.credentials?.expiresAt == sessions[0].credentials?.expiresAt)
            #expect(clear.credentials?.refreshToken == nil)
            #expect(SealingFixtures.keyID(of: clear) == "key-a")
        }
    }

    /// The DPoP key belongs to the credentials: sealed with the tokens, never in the clear record (issue 27).
    @Test func aDPoPKeyIsSealedWithTheTokensAndLoadsBack() async throws {
        try await Self.withDirectory { directory in
            let store = Self.sealed(directory, try SealingFixtures.ringA())
            var session = SealingFixtures.session("alice")
            let key = DPoPKey(algorithm: .es256, privateKey: Array("dpop-private-key-bytes-0123456789".utf8))
            session.credentials?.dpopKey = key
            session.credentials?.tokenType = "DPoP"
            try await store.save(session, identifier: "alice")
            #expect(try await store.load(identifier: "alice")?.credentials?.dpopKey == key)
            #expect(try await store.base.load(identifier: "alice")?.credentials?.dpopKey == nil, "not in the clear")
            let stored = key.storedForm.split(separator: ":")[1]
            for (url, bytes) in try SealingFixtures.rawFiles(under: directory) {
                let text = String(decoding: bytes, as: UTF8.self)
                #expect(!text.contains(stored) && !text.contains("dpop-private"), "\(url.lastPathComponent)")
            }
        }
    }

    @Test func eachWriteSealsUnderAFreshNonce() async throws {
        try await Self.withDirectory { directory in
            let store = Self.sealed(directory, try SealingFixtures.ringA())
            let session = SealingFixtures.session("alice")
            try await store.save(session, identifier: "alice")
            let first = try await store.base.load(identifier: "alice")?.credentials?.accessToken
            try await store.save(session, identifier: "alice")
            let second = try await store.base.load(identifier: "alice")?.credentials?.accessToken
            #expect(first != nil && second != nil && first != second)
        }
    }

    @Test func recordsSealedUnderAnOldKeyLoadAfterARotationAndResealAllMovesThemToTheNewKey() async throws {
        try await Self.withDirectory { directory in
            let users = ["alice", "bob", "carol", "dave"]
            let before = Self.sealed(directory, try SealingFixtures.ringA())
            for user in users { try await before.save(SealingFixtures.session(user), identifier: user) }

            let rotated = Self.sealed(directory, try SealingFixtures.ringBA())
            for user in users { #expect(try await rotated.load(identifier: user) == SealingFixtures.session(user)) }
            // The next write of a record seals it with the new key.
            try await rotated.save(SealingFixtures.session("alice"), identifier: "alice")
            #expect(SealingFixtures.keyID(of: try await rotated.base.load(identifier: "alice")) == "key-b")
            #expect(SealingFixtures.keyID(of: try await rotated.base.load(identifier: "bob")) == "key-a")

            let report = try await rotated.resealAll()
            #expect(report.resealed.sorted() == ["bob", "carol", "dave"])
            #expect(report.alreadyCurrent == ["alice"])
            #expect(report.unopenable.isEmpty && report.isComplete)
            for user in users {
                #expect(SealingFixtures.keyID(of: try await rotated.base.load(identifier: user)) == "key-b")
            }
            // Key A retired: everything still opens.
            let retired = Self.sealed(directory, try SealingFixtures.ringB())
            for user in users { #expect(try await retired.load(identifier: user) == SealingFixtures.session(user)) }
            #expect(try await retired.resealAll() == SealedTokenStoreResealReport(alreadyCurrent: users.sorted()))
        }
    }

    @Test func aliceSealedRecordWrittenUnderBobsIdentifierIsRefused() async throws {
        try await Self.withDirectory { directory in
            let store = Self.sealed(directory, try SealingFixtures.ringA())
            try await store.save(SealingFixtures.session("alice"), identifier: "alice")
            let alices = try #require(try await store.base.load(identifier: "alice"))
            try await store.base.save(alices, identifier: "bob")
            let problem = await SealingFixtures.problem { _ = try await store.load(identifier: "bob") }
            #expect(problem == .authenticationFailed)
            // Another namespace does not open it either.
            let other = SealedTokenStore(
                base: FileTokenStore(directory: directory), keyRing: try SealingFixtures.ringA(), namespace: "other")
            #expect(
                await SealingFixtures.problem { _ = try await other.load(identifier: "alice") } == .authenticationFailed
            )
            #expect(try await store.load(identifier: "alice") == SealingFixtures.session("alice"))
        }
    }

    @Test func aFlippedBitIsRefusedAndTheRecordKept() async throws {
        try await Self.withDirectory { directory in
            let store = Self.sealed(directory, try SealingFixtures.ringA())
            try await store.save(SealingFixtures.session("alice"), identifier: "alice")
            let tampered = try SealingFixtures.flippingABit(
                in: try #require(try await store.base.load(identifier: "alice")))
            try await store.base.save(tampered, identifier: "alice")
            let filesBefore = try SealingFixtures.rawFiles(under: directory)
            #expect(
                await SealingFixtures.problem { _ = try await store.load(identifier: "alice") } == .authenticationFailed
            )
            #expect(try SealingFixtures.rawFiles(under: directory) == filesBefore, "nothing was deleted or rewritten")
            #expect(try await store.storedIdentifiers() == ["alice"])
        }
    }

    @Test func theSameSealedBytesSpelledAnotherWayAreRefused() async throws {
        try await Self.withDirectory { directory in
            let store = Self.sealed(directory, try SealingFixtures.ringA())
            // Three identifiers of consecutive lengths: at least one record's base64 ends in padding.
            var respelled = 0
            for identifier in ["al", "bob", "carl"] {
                try await store.save(SealingFixtures.session(identifier), identifier: identifier)
                let stored = try #require(try await store.base.load(identifier: identifier))
                guard let other = try SealingFixtures.respellingTheBase64(in: stored) else { continue }
                try await store.base.save(other, identifier: identifier)
                #expect(
                    await SealingFixtures.problem { _ = try await store.load(identifier: identifier) } == .malformed)
                respelled += 1
            }
            #expect(respelled > 0)
        }
    }

    @Test func aRecordSealedWithAKeyMissingFromTheRingIsRefusedKeptAndReportedByRestore() async throws {
        try await Self.withDirectory { directory in
            let writer = Self.sealed(directory, try SealingFixtures.ringA())
            try await writer.save(SealingFixtures.session("alice"), identifier: "alice")
            try await writer.saveCurrentIdentifier("alice")
            let filesBefore = try SealingFixtures.rawFiles(under: directory)

            let withoutA = Self.sealed(directory, try SealingFixtures.ringB())
            await #expect(throws: UserSessionError(.storeCorrupt, "")) {
                _ = try await withoutA.load(identifier: "alice")
            }
            #expect(
                await SealingFixtures.problem { _ = try await withoutA.load(identifier: "alice") }
                    == .unknownKey(id: "key-a"))
            // The controller sees a coordinated store, reports the record as corrupt and keeps it.
            let controller = UserSessionController(store: withoutA)
            #expect(await !controller.canRestore)
            await #expect(throws: UserSessionError(.storeCorrupt, "")) { _ = try await controller.restore() }
            #expect(controller.session.state != .opened)
            await controller.shutdown()
            // A registry's lookup reports it the same way, and keeps it too.
            let registry = UserSessionRegistry(store: withoutA)
            await #expect(throws: UserSessionError(.storeCorrupt, "")) { _ = try await registry.session(for: "alice") }
            await registry.shutdown()
            let report = try await withoutA.resealAll()
            #expect(report.unopenable == ["alice"] && !report.isComplete)
            #expect(try SealingFixtures.rawFiles(under: directory) == filesBefore, "the record is kept as it was")
            // With the key back in the ring, it opens.
            #expect(try await writer.load(identifier: "alice") == SealingFixtures.session("alice"))
        }
    }

    @Test func aStoreOfRecordsInTheClearMovesToSealingWithAcceptsUnsealedRecordsAndResealAll() async throws {
        try await Self.withDirectory { directory in
            let plain = FileTokenStore(directory: directory)
            for user in ["alice", "bob"] { try await plain.save(SealingFixtures.session(user), identifier: user) }
            let strict = Self.sealed(directory, try SealingFixtures.ringA())
            #expect(await SealingFixtures.problem { _ = try await strict.load(identifier: "alice") } == .notSealed)
            let moving = SealedTokenStore(
                base: plain, keyRing: try SealingFixtures.ringA(), namespace: "tests", acceptsUnsealedRecords: true)
            #expect(try await moving.load(identifier: "alice") == SealingFixtures.session("alice"))
            #expect(try await moving.resealAll().resealed.sorted() == ["alice", "bob"])
            for user in ["alice", "bob"] {
                #expect(try await strict.load(identifier: user) == SealingFixtures.session(user))
            }
            let secrets = SealingFixtures.secrets(of: ["alice", "bob"].map(SealingFixtures.session))
            for (url, bytes) in try SealingFixtures.rawFiles(under: directory) {
                #expect(SecretScan.leaked(secrets, in: bytes).isEmpty, "\(url.lastPathComponent) leaks a secret")
            }
        }
    }

    @Test func errorsAndDescriptionsNeverContainKeyMaterialOrTokens() async throws {
        try await Self.withDirectory { directory in
            let store = Self.sealed(directory, try SealingFixtures.ringBA())
            let session = SealingFixtures.session("alice")
            try await store.save(session, identifier: "alice")
            try await store.base.save(try #require(try await store.base.load(identifier: "alice")), identifier: "bob")
            var texts = [String(describing: store), String(reflecting: store), "\(try SealingFixtures.keyA())"]
            var dumped = ""
            dump(store, to: &dumped)
            dump(try SealingFixtures.ringBA(), to: &dumped)
            texts.append(dumped)
            for identifier in ["bob"] {
                do {
                    _ = try await Self.sealed(directory, try SealingFixtures.ringA()).load(identifier: identifier)
                } catch {
                    texts.append(String(describing: error))
                    texts.append(String(reflecting: error))
                }
                do { _ = try await store.load(identifier: identifier) } catch { texts.append("\(error)") }
            }
            #expect(texts.count >= 7)
            let secrets =
                SealingFixtures.secrets(of: [session]) + [String(decoding: SealingFixtures.materialB, as: UTF8.self)]
            for text in texts {
                #expect(SecretScan.leaked(secrets, in: Array(text.utf8)).isEmpty, "\(text)")
                #expect(!text.contains("5c5c5c5c") && !text.contains("a1a1a1a1"), "\(text)")
            }
        }
    }

    @Test func overACoordinatedStoreTheSealedStoreCoordinatesToo() async throws {
        try await Self.withDirectory { directory in
            let store = Self.sealed(directory, try SealingFixtures.ringA())
            let anyStore: any TokenStore = store
            #expect(anyStore is any CoordinatedTokenStore, "the controller finds the lease and the revisions")
            let plain: any TokenStore = SealedTokenStore(
                base: InMemoryTokenStore(), keyRing: try SealingFixtures.ringA(), namespace: "tests")
            #expect(!(plain is any CoordinatedTokenStore))

            let first = try await store.save(
                SealingFixtures.session("alice"), identifier: "alice", expectedRevision: nil)
            let revised = try #require(try await store.loadRevised(identifier: "alice"))
            #expect(revised.revision == first && revised.session == SealingFixtures.session("alice"))
            await #expect(throws: UserSessionError(.revisionConflict, "")) {
                try await store.save(SealingFixtures.session("mallory"), identifier: "alice", expectedRevision: nil)
            }
            let second = try await store.save(
                SealingFixtures.session("bob"), identifier: "alice", expectedRevision: first)
            #expect(second > first)
            let leased = try await store.withRefreshLease(identifier: "alice") { 42 }
            #expect(leased == 42)
        }
    }
}
#endif
