import Foundation
import Testing

@testable import UserSessions

/// Two holes between the processes of a coordinated store that the schedule property found once it played two
/// processes (`LedgerPropertyTests`, `USER_SESSIONS_LEDGER_PROCESSES=2`): each lost a rotation or a sign-out across
/// processes, never within one.
struct CoordinatedLeasePromiseTests {
    /// The schedule property's bench over a coordinated store, against the rotating server.
    static func bench() throws -> (LedgerPropertyTests.Bench, CoordinatedOutageStore) {
        let bench = LedgerPropertyTests.Bench(.coordinated, .rotating)
        return (bench, try #require(bench.coordinatedStore))
    }

    /// Waits, bounded by the hang guard, for the first event of `events` whose kind `matches`.
    static func waitFor(
        _ what: String, in events: AsyncStream<UserSessionEvent>,
        _ matches: @escaping @Sendable (UserSessionEvent.Kind) -> Bool
    ) async throws {
        try await withHangGuard(what) {
            for await event in events where matches(event.kind) { return }
        }
    }

    /// A session whose writes a later sign-in of its user fenced, which then took that sign-in's record from the
    /// store and refreshed it under the lease: its commit writes nothing (fenced), and the rotation used to reach the
    /// store only later, from the ledger, after the lease was released. Another process taking the lease in between
    /// read the spent refresh token and presented it again.
    @Test func aRefreshUnderTheLeaseIsInTheStoreWhenTheLeaseIsReleasedEvenWhenItsSessionIsFenced() async throws {
        let (bench, store) = try Self.bench()
        let fenced = bench.controller()
        _ = try await fenced.open(bench.server.signIn("alice"))
        let events = fenced.events(bufferSize: 100)
        let signingIn = bench.controller()
        _ = try await signingIn.open(bench.server.signIn("alice", expiresIn: 10))
        await signingIn.close()
        // The sign-in's write reaches the fenced session as a change notification: it adopts the record.
        try await Self.waitFor("the fenced session adopts the sign-in's record", in: events) {
            if case .credentialsUpdated = $0 { true } else { false }
        }
        let adopted = fenced.credentials?.refreshToken == "alice~1/rt-0"
        #expect(adopted, "the fenced session holds the sign-in's credentials")

        bench.time.advance(by: 20)
        _ = try await fenced.accessToken()
        // The token is served when the commit publishes it, before the flight lets go of the lease: waited for.
        await store.leaseReleases.wait(for: store.leasesTaken)

        let sentTheAdoptedToken = bench.server.presented == ["alice~1/rt-0"]
        #expect(sentTheAdoptedToken, "one refresh, of the adopted record's refresh token")
        // What the next holder of the lease reads first, in any process: the rotation, not the token it spent.
        let storedTheRotation = store.storedAtLeaseRelease.last == "alice~1/rt-1"
        #expect(storedTheRotation, "the store held the spent refresh token when the lease was released")
        await fenced.close()
    }

    /// Credentials handed over to a session whose record another process removed (the user signed out there) before
    /// this process heard of it: the write used to replace "whatever is stored", and so brought the record back.
    @Test func credentialsHandedOverAfterASignOutElsewhereDoNotBringTheRecordBack() async throws {
        let (bench, store) = try Self.bench()
        let controller = bench.controller()
        _ = try await controller.open(bench.server.signIn("alice"))
        let events = controller.events(bufferSize: 100)
        // Another process signs her out. Its notification has not reached this process yet when the update writes.
        let otherProcess = store.anotherProcess()
        try await otherProcess.remove(identifier: "alice")
        guard let handedOver = bench.server.signIn("alice").credentials else {
            Issue.record("the server signed nobody in")
            return
        }

        await #expect {
            try await controller.updateCredentials(handedOver)
        } throws: { error in
            (error as? UserSessionError)?.code == .sessionNotOpen
        }
        let cameBack = store.record("alice") != nil
        #expect(!cameBack, "the record of the user signed out elsewhere came back")
        // And the session closes, as when the notification of the removal arrives.
        try await Self.waitFor("the session closes as cleared elsewhere", in: events) {
            $0 == .closed(.clearedElsewhere)
        }
        #expect(!controller.session.isOpened)
    }
}
