import Foundation
import Testing

@testable import UserSessions

/// ``FileTokenStore`` as a ``CoordinatedTokenStore``: revisions in the file, conditional writes, the `flock` lease.
/// (Several processes sharing a directory: `FleetTests`.)
@Suite struct FileTokenStoreCoordinationTests {
    static func session(_ token: String) -> StoredSession {
        StoredSession(
            userInfo: UserInfo(id: "u"),
            credentials: Credentials(
                accessToken: token, refreshToken: "rt-" + token,
                expiresAt: Date(timeIntervalSinceReferenceDate: 900_000_000)))
    }

    static func scratch() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appending(
            path: "user-sessions-coordination-\(UUID().uuidString)", directoryHint: .isDirectory)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    @Test func revisionsGrowWithEveryWriteAndSurviveANewInstance() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = FileTokenStore(directory: directory)
        #expect(try await store.loadRevised(identifier: "u") == nil)
        let first = try await store.save(Self.session("a"), identifier: "u", expectedRevision: nil)
        try await store.save(Self.session("b"), identifier: "u")
        let reread = try #require(try await FileTokenStore(directory: directory).loadRevised(identifier: "u"))
        #expect(reread.revision > first)
        #expect(reread.session == Self.session("b"))
        #expect(try await store.load(identifier: "u") == Self.session("b"))
    }

    @Test func aConditionalWriteOnAnOldRevisionConflictsAndLeavesTheRecord() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = FileTokenStore(directory: directory)
        let first = try await store.save(Self.session("a"), identifier: "u", expectedRevision: nil)
        let second = try await store.save(Self.session("b"), identifier: "u", expectedRevision: first)
        for stale in [first, nil] {
            let error = await #expect(throws: UserSessionError.self) {
                try await store.save(Self.session("c"), identifier: "u", expectedRevision: stale)
            }
            #expect(error?.code == .revisionConflict)
        }
        #expect(
            try await store.loadRevised(identifier: "u") == RevisedSession(session: Self.session("b"), revision: second)
        )
        let empty = await #expect(throws: UserSessionError.self) {
            try await store.save(Self.session("c"), identifier: "nobody", expectedRevision: 3)
        }
        #expect(empty?.code == .revisionConflict)
    }

    @Test func aRecordWrittenAfterARemovalStartsAboveTheRemovedRevision() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = FileTokenStore(directory: directory)
        var previous: UInt64 = 0
        // Back to back, as fast as the disk allows: never an equal or smaller revision, whichever instance writes.
        for round in 0..<20 {
            let writer = round.isMultiple(of: 2) ? store : FileTokenStore(directory: directory)
            let revision = try await writer.save(Self.session("a"), identifier: "u", expectedRevision: nil)
            #expect(revision > previous)
            previous = revision
            try await writer.remove(identifier: "u")
        }
    }

    @Test func aVersionOneFileReadsAsRevisionOne() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = FileTokenStore(directory: directory)
        try await store.save(Self.session("a"), identifier: "u")
        let file = directory.appending(path: try IdentifierEncoding.name(for: "u").value + ".json")
        var object = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any])
        object["version"] = 1
        object.removeValue(forKey: "revision")
        try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]).write(to: file)
        let legacy = try #require(try await store.loadRevised(identifier: "u"))
        #expect(legacy.revision == 1)
        #expect(legacy.session.credentials?.accessToken == "a")
        let next = try await store.save(Self.session("b"), identifier: "u", expectedRevision: 1)
        #expect(next > 1)
    }

    @Test func theLeaseExcludesAnotherHolderUntilReleasedAndItsFileIsPrivate() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Two instances, as two processes would have: flock locks conflict between open file descriptions.
        let first = FileTokenStore(directory: directory)
        let second = FileTokenStore(directory: directory)
        let inside = AsyncGate()
        let release = AsyncGate()
        let firstDone = ArrivalCounter()
        let holder = Task {
            try await first.withRefreshLease(identifier: "u") {
                inside.open()
                await release.wait()
                firstDone.arrive()
            }
        }
        await inside.wait()
        let waiter = Task {
            try await second.withRefreshLease(identifier: "u") { firstDone.count == 1 }
        }
        // Another identifier's lease is independent.
        #expect(try await second.withRefreshLease(identifier: "v") { true })
        release.open()
        try await holder.value
        #expect(try await waiter.value, "the second holder ran only after the first released the lease")
        var status = stat()
        let lease = directory.appending(path: try IdentifierEncoding.name(for: "u").value + ".lease")
        #expect(stat(lease.path(percentEncoded: false), &status) == 0)
        #expect(status.st_mode & 0o777 == 0o600)
        #expect(try await first.storedIdentifiers() == [], "lease files are not records")
    }

    @Test func waitingForTheLeaseEndsWhenTheWaiterIsCancelled() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = FileTokenStore(directory: directory)
        let inside = AsyncGate()
        let release = AsyncGate()
        let holder = Task {
            try await store.withRefreshLease(identifier: "u") {
                inside.open()
                await release.wait()
            }
        }
        await inside.wait()
        let waiter = Task { try await FileTokenStore(directory: directory).withRefreshLease(identifier: "u") { 1 } }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        release.open()
        try await holder.value
    }

    @Test func openingASessionReplacesACorruptRecordAndHoldsItsRevision() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = FileTokenStore(directory: directory)
        let file = directory.appending(path: try IdentifierEncoding.name(for: "u").value + ".json")
        try Data("{\"form".utf8).write(to: file)
        let controller = UserSessionController(store: store)
        _ = try await controller.open(
            UserSessionPrototype(
                identifier: "u", userInfo: UserInfo(id: "u"), credentials: Self.session("a").credentials))
        let record = try #require(try await store.loadRevised(identifier: "u"))
        #expect(record.session.credentials?.accessToken == "a")
        #expect(controller.gate.inspect { $0.heldRevision } == record.revision)
        await controller.close()
    }

    @Test func fileStoresDoNotNotify() async throws {
        let store = FileTokenStore(directory: try Self.scratch())
        defer { try? FileManager.default.removeItem(at: store.directory) }
        var received = 0
        for await _ in store.changes() { received += 1 }
        #expect(received == 0)
    }
}
