#if Sealing
import Foundation
import Testing
import UserSessionsTestSupport

@testable import UserSessions
@testable import UserSessionsSealing

/// Seam 1 of issue 25: a reseal of this process is a write like any other, so it goes through the ledger of the
/// sealed store (in the identifier's write turn) and never writes a record back over a refresh that committed
/// after it read the record.
struct SealedResealSeamTests {
    /// An in-memory base store whose next load of an identifier can be held after it read the record.
    final class HeldLoadStore: ForwardingTokenStore {
        let base = InMemoryTokenStore()
        var forwardedTo: any TokenStore { base }
        private let held = Locked<[String: CheckedContinuation<Void, Never>?]>([:])
        private let arrived = Locked(false)

        init() {}

        /// The next load of `identifier` stops after reading until ``letGo(_:)``.
        func holdNextLoad(of identifier: String) { held.withLock { $0[identifier] = .some(nil) } }
        var loadIsHeld: Bool { arrived.withLock { $0 } }

        func letGo(_ identifier: String) {
            let waiting = held.withLock { $0.removeValue(forKey: identifier) }
            if let waiting, let waiting { waiting.resumeVisibly() }
        }

        func load(identifier: String) async throws -> StoredSession? {
            let stored = try await base.load(identifier: identifier)
            let hold = held.withLock { $0[identifier] != nil }
            if hold {
                await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    held.withLock { $0[identifier] = .some(continuation) }
                    arrived.withLock { $0 = true }
                }
            }
            return stored
        }
    }

    final class Flag: Sendable {
        private let raised = Locked(false)

        init() {}

        func raise() { raised.withLock { $0 = true } }
        var isRaised: Bool { raised.withLock { $0 } }
    }

    /// Rotates `rt-n` into `at-(n+1)`/`rt-(n+1)`.
    final class Rotator: TokenRefresher {
        let presented = Locked<[String]>([])

        init() {}

        func refresh(_ credentials: Credentials) async throws -> Credentials {
            let token = credentials.refreshToken ?? ""
            presented.withLock { $0.append(token) }
            let next = (Int(token.dropFirst(3)) ?? 0) + 1
            return Credentials(
                accessToken: "at-\(next)", refreshToken: "rt-\(next)", expiresAt: Date().addingTimeInterval(3600),
                lastRefreshedAt: Date(), source: .refresh)
        }
    }

    @Test func aResealOverAPlainStoreNeverWritesBackARecordARefreshReplacedMeanwhile() async throws {
        let base = HeldLoadStore()
        let old = SealedTokenStore(base: base, keyRing: try SealingFixtures.ringA(), namespace: "tests")
        let alice = StoredSession(
            userInfo: UserInfo(id: "alice"),
            credentials: Credentials(
                accessToken: "at-0", refreshToken: "rt-0", expiresAt: Date().addingTimeInterval(3600),
                source: .signIn))
        try await old.save(alice, identifier: "alice")
        let sealed = SealedTokenStore(base: base, keyRing: try SealingFixtures.ringBA(), namespace: "tests")
        let controller = UserSessionController(store: sealed, refresher: Rotator())
        _ = try await controller.restore(identifier: "alice")

        // The reseal reads the record sealed with key A and is held before it writes it back.
        base.holdNextLoad(of: "alice")
        let reseal = Task { try await sealed.resealAll() }
        while !base.loadIsHeld { await Task.yield() }
        let done = Flag()
        let refresh = Task {
            defer { done.raise() }
            return try await controller.refreshCredentials()
        }
        let ledger = CredentialsLedger.shared(for: sealed)
        while !done.isRaised && ledger.writersWaiting("alice") == 0 { await Task.yield() }
        base.letGo("alice")
        #expect(try await refresh.value.refreshToken == "rt-1")
        _ = try await reseal.value

        #expect(try await sealed.load(identifier: "alice")?.credentials?.refreshToken == "rt-1")
        await controller.close()
    }

    /// A file store whose conditional writes of one identifier always find that another writer changed the record
    /// since it was read.
    final class RestlessStore: CoordinatedTokenStore, ForwardingTokenStore {
        let base: FileTokenStore
        var forwardedTo: any TokenStore { base }
        let restless: String
        let conflicts = Locked(0)

        init(directory: URL, restless: String) {
            base = FileTokenStore(directory: directory)
            self.restless = restless
        }

        func loadRevised(identifier: String) async throws -> RevisedSession? {
            try await base.loadRevised(identifier: identifier)
        }
        func save(_ session: StoredSession, identifier: String, expectedRevision: UInt64?) async throws -> UInt64 {
            if identifier == restless, expectedRevision != nil {
                conflicts.withLock { $0 += 1 }
                throw UserSessionError(.revisionConflict, "the record changed elsewhere")
            }
            return try await base.save(session, identifier: identifier, expectedRevision: expectedRevision)
        }
        func withRefreshLease<Result: Sendable>(
            identifier: String, _ body: @Sendable () async throws -> Result
        ) async throws -> Result {
            try await base.withRefreshLease(identifier: identifier, body)
        }
        func changes() -> AsyncStream<TokenStoreChange> { base.changes() }
    }

    /// A record another writer changes on every attempt does not stop the reseal of the others: it is listed as
    /// changed elsewhere, the report is not complete, and a later run reseals it.
    @Test func aRecordThatKeepsChangingElsewhereIsListedAndTheOthersAreStillResealed() async throws {
        let directory = try SealingFixtures.temporaryDirectory("restless")
        defer { try? FileManager.default.removeItem(at: directory) }
        let base = RestlessStore(directory: directory, restless: "alice")
        let old = SealedTokenStore(base: base, keyRing: try SealingFixtures.ringA(), namespace: "tests")
        for user in ["alice", "bob", "carol"] {
            try await old.save(SealingFixtures.session(user), identifier: user)
        }
        let new = SealedTokenStore(base: base, keyRing: try SealingFixtures.ringBA(), namespace: "tests")

        let report = try await new.resealAll()
        #expect(report.resealed.sorted() == ["bob", "carol"])
        #expect(report.changedElsewhere == ["alice"])
        #expect(report.alreadyCurrent.isEmpty && report.unopenable.isEmpty)
        #expect(!report.isComplete, "a key still sealing a record must not be retired")
        #expect(base.conflicts.withLock { $0 } == SealedTokenStore<RestlessStore>.resealAttempts)
        let stillOld = SealedTokenStore(base: base, keyRing: try SealingFixtures.ringA(), namespace: "tests")
        #expect(try await stillOld.load(identifier: "alice") == SealingFixtures.session("alice"))

        let calm = SealedTokenStore(base: base.base, keyRing: try SealingFixtures.ringBA(), namespace: "tests")
        let again = try await calm.resealAll()
        #expect(again.resealed == ["alice"] && again.changedElsewhere.isEmpty && again.isComplete)
        let current = SealedTokenStore(base: base.base, keyRing: try SealingFixtures.ringB(), namespace: "tests")
        for user in ["alice", "bob", "carol"] {
            #expect(try await current.load(identifier: user) == SealingFixtures.session(user))
        }
    }
}
#endif
