#if PostgreSQL
import Foundation
import PostgresNIO
import Testing
import UserSessions
import UserSessionsPostgres
import UserSessionsTestSupport

/// The refresh lease and the change notifications between two store instances with clients of their own (two
/// instances of a fleet). Serialized: the lease checks look at every advisory lock of the database.
@Suite(.serialized, .enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.skipMessage))
struct PostgresCoordinationTests {
    /// Two stores of one namespace over two clients (two instances of a fleet).
    @discardableResult
    static func withTwoInstances<Value: Sendable>(
        leaseDeadline: Duration = .seconds(30),
        _ body: (PostgresTokenStore, PostgresTokenStore, PostgresClient) async throws -> Value
    ) async throws -> Value {
        try await PostgresTestServer.withSchema { schema, admin in
            try await PostgresTestServer.withClient(schema: schema) { firstClient in
                try await PostgresTestServer.withClient(schema: schema) { secondClient in
                    let namespace = PostgresTestServer.uniqueNamespace()
                    let first = try PostgresTokenStore(
                        client: firstClient, namespace: namespace, leaseDeadline: leaseDeadline,
                        operationTimeout: PostgresTestClient.operationTimeout)
                    let second = try PostgresTokenStore(
                        client: secondClient, namespace: namespace, leaseDeadline: leaseDeadline,
                        operationTimeout: PostgresTestClient.operationTimeout)
                    try await first.prepare()
                    try await second.prepare()
                    return try await body(first, second, admin)
                }
            }
        }
    }

    /// The backends holding (`granted`) or waiting for the refresh lease of "alice" in `store`'s namespace.
    static func aliceLease(_ admin: PostgresClient, granted: Bool, _ store: PostgresTokenStore) async throws -> [Int64]
    {
        try await PostgresTestServer.leaseBackends(admin, granted: granted, of: store, identifier: "alice")
    }

    /// Takes the refresh lease of "alice" on `store` and holds it until `release` opens, then returns `value`;
    /// returns the holding task once the lease is held.
    static func holdAliceLease<Value: Sendable>(
        on store: PostgresTokenStore, until release: TestGate, returning value: Value
    ) async -> Task<Value, any Error> {
        let entered = TestGate()
        let holder = Task {
            try await store.withRefreshLease(identifier: "alice") {
                entered.open()
                await release.wait()
                return value
            }
        }
        await entered.wait()
        return holder
    }

    @Test func theLeaseIsHeldByOneInstanceAtATime() async throws {
        try await Self.withTwoInstances { first, second, admin in
            let log = Recorder()
            let entered = TestGate()
            let release = TestGate()
            let holder = Task {
                try await first.withRefreshLease(identifier: "alice") {
                    log.append("first in")
                    entered.open()
                    await release.wait()
                    log.append("first out")
                }
            }
            await entered.wait()
            let waiter = Task {
                try await second.withRefreshLease(identifier: "alice") { log.append("second in") }
            }
            try await PostgresTestServer.eventually("the second instance waits for the lease") {
                try await Self.aliceLease(admin, granted: false, first).count == 1
            }
            #expect(log.entries == ["first in"])
            // Another identifier's lease is not held up.
            try await second.withRefreshLease(identifier: "bob") { log.append("bob") }
            release.open()
            try await holder.value
            try await waiter.value
            #expect(log.entries == ["first in", "bob", "first out", "second in"])
            #expect(try await Self.aliceLease(admin, granted: true, first).isEmpty)
        }
    }

    @Test func killingTheHoldersConnectionReleasesTheLease() async throws {
        try await Self.withTwoInstances { first, second, admin in
            let release = TestGate()
            let holder = await Self.holdAliceLease(on: first, until: release, returning: "holder's result")
            let holders = try await Self.aliceLease(admin, granted: true, first)
            #expect(holders.count == 1)
            let waiter = Task { try await second.withRefreshLease(identifier: "alice") { "waiter's result" } }
            try await PostgresTestServer.eventually("the second instance waits for the lease") {
                try await Self.aliceLease(admin, granted: false, first).count == 1
            }
            // What the server sees when the holder's process is SIGKILLed: its connection ends.
            try await admin.query("SELECT pg_terminate_backend(\(holders[0])::int)")
            #expect(try await waiter.value == "waiter's result")
            release.open()
            // The holder's body ran to its end; its result is not lost with the lease.
            #expect(try await holder.value == "holder's result")
        }
    }

    @Test func aHolderThatHangsLosesTheLeaseAtTheDeadline() async throws {
        try await Self.withTwoInstances(leaseDeadline: .seconds(1)) { first, second, admin in
            let release = TestGate()
            let holder = await Self.holdAliceLease(on: first, until: release, returning: ())
            // The holder never returns on its own; PostgreSQL ends its session after the lease deadline.
            try await second.withRefreshLease(identifier: "alice") {}
            release.open()
            try await holder.value
        }
    }

    @Test func cancellingAWaiterEndsItsWaitOnTheServer() async throws {
        try await Self.withTwoInstances { first, second, admin in
            let release = TestGate()
            let holder = await Self.holdAliceLease(on: first, until: release, returning: ())
            let waiter = Task { try await second.withRefreshLease(identifier: "alice") { "entered" } }
            try await PostgresTestServer.eventually("the second instance waits for the lease") {
                try await Self.aliceLease(admin, granted: false, first).count == 1
            }
            waiter.cancel()
            await #expect(throws: CancellationError.self) { try await waiter.value }
            try await PostgresTestServer.eventually("the waiting query is gone") {
                try await Self.aliceLease(admin, granted: false, first).isEmpty
            }
            release.open()
            try await holder.value
        }
    }

    @Test func changesReachEverySubscriberOfAnotherInstance() async throws {
        try await Self.withTwoInstances { writer, reader, admin in
            var changes = reader.changes().makeAsyncIterator()
            try await reader.listening()
            #expect(await changes.next() == .resynchronize, "subscribed before the listener was ready")
            var late = reader.changes().makeAsyncIterator()
            let identifier = "o'brien \"\\ \u{E9}"
            let revision = try await writer.save(
                TokenStoreConformance.sample("alice"), identifier: identifier, expectedRevision: nil)
            #expect(await changes.next() == .saved(identifier: identifier, revision: revision))
            #expect(await late.next() == .saved(identifier: identifier, revision: revision))
            try await writer.remove(identifier: identifier)
            #expect(await changes.next() == .removed(identifier: identifier))
            #expect(await late.next() == .removed(identifier: identifier))
            // An identifier too long for a notification's payload asks for a resynchronization.
            try await writer.save(
                TokenStoreConformance.sample("long"), identifier: String(repeating: "l", count: 10_000))
            #expect(await changes.next() == .resynchronize)
            // A failed conditional write announces nothing; the next change arrives next.
            await #expect(throws: UserSessionError(.revisionConflict, "")) {
                try await writer.save(TokenStoreConformance.sample("bob"), identifier: "bob", expectedRevision: 99)
            }
            // Another namespace's writes are not heard; the next change is this namespace's.
            let other = try PostgresTokenStore(
                client: admin, namespace: "other-\(reader.namespace)",
                operationTimeout: PostgresTestClient.operationTimeout)
            try await other.save(TokenStoreConformance.sample("carol"), identifier: "carol")
            let bob = try await writer.save(
                TokenStoreConformance.sample("bob"), identifier: "bob", expectedRevision: nil)
            #expect(await changes.next() == .saved(identifier: "bob", revision: bob))
        }
    }

    @Test func aSubscriberThatFallsBehindIsToldToResynchronize() async throws {
        try await Self.withTwoInstances { writer, reader, _ in
            var behind = reader.changes().makeAsyncIterator()
            let reading = reader.changes()
            try await reader.listening()
            #expect(await behind.next() == .resynchronize)
            // Another subscriber keeps up; when it has the last change, the same broadcast has offered it to `behind`.
            let keptUp = Task {
                for await change in reading {
                    if case .saved(identifier: "u299", _) = change { return true }
                }
                return false
            }
            for index in 0..<300 {
                try await writer.save(TokenStoreConformance.sample("u\(index)"), identifier: "u\(index)")
            }
            #expect(await keptUp.value)
            for _ in 0..<256 {
                guard case .saved = await behind.next() else {
                    Issue.record("the first 256 changes arrive as they were")
                    return
                }
            }
            let next = try await writer.save(
                TokenStoreConformance.sample("after"), identifier: "after", expectedRevision: nil)
            #expect(await behind.next() == .resynchronize)
            while let change = await behind.next() {
                if change == .saved(identifier: "after", revision: next) { break }
            }
        }
    }

    @Test func waitingForTheListenerWithoutSubscribersIsAWrongState() async throws {
        try await Self.withTwoInstances { _, reader, _ in
            await #expect(throws: UserSessionError(.wrongState, "")) { try await reader.listening() }
        }
    }

    @Test func aKilledListenerReconnectsAndAsksForAResynchronization() async throws {
        try await Self.withTwoInstances { writer, reader, admin in
            var changes = reader.changes().makeAsyncIterator()
            try await reader.listening()
            #expect(await changes.next() == .resynchronize)
            let listeners = try await PostgresTestServer.integers(
                admin,
                "SELECT pid::bigint FROM pg_stat_activity WHERE query = \("LISTEN \"user_sessions.\(reader.namespace)\";")"
            )
            #expect(listeners.count == 1)
            try await admin.query("SELECT pg_terminate_backend(\(listeners[0])::int)")
            // Whatever was committed while the listener was away is covered by this.
            #expect(await changes.next() == .resynchronize)
            let revision = try await writer.save(
                TokenStoreConformance.sample("alice"), identifier: "alice", expectedRevision: nil)
            #expect(await changes.next() == .saved(identifier: "alice", revision: revision))
        }
    }
}

/// An ordered record of what happened, shared between tasks.
final class Recorder: Sendable {
    private let state = Locked<[String]>([])
    func append(_ entry: String) { state.withLock { $0.append(entry) } }
    var entries: [String] { state.withLock { $0 } }
}
#endif
