import Foundation
import Testing

@testable import UserSessions

/// Two holes between the processes of a coordinated store that the schedule property found once it played two
/// processes (`LedgerPropertyTests`, `USER_SESSIONS_LEDGER_PROCESSES=2`): each lost a rotation or a sign-out across
/// processes, never within one.
struct CoordinatedLeasePromiseTests {
    /// A coordinated store in memory, a rotating token server and a manual clock.
    struct Bench {
        let time = ManualTime()
        let server: TokenFamilyServer
        let store = CoordinatedOutageStore()
        let configuration: UserSessionController.Configuration

        init() {
            let time = self.time
            server = TokenFamilyServer(now: { time.now })
            configuration = UserSessionController.Configuration(clock: time.clock)
        }

        func controller() -> UserSessionController {
            UserSessionController(store: store, refresher: server, configuration: configuration)
        }
    }

    /// A session whose writes a later sign-in of its user fenced, which then took that sign-in's record from the
    /// store and refreshed it under the lease: its commit writes nothing (fenced), and the rotation used to reach the
    /// store only later, from the ledger, after the lease was released. Another process taking the lease in between
    /// read the spent refresh token and presented it again.
    @Test func aRefreshUnderTheLeaseIsInTheStoreWhenTheLeaseIsReleasedEvenWhenItsSessionIsFenced() async throws {
        let bench = Bench()
        let fenced = bench.controller()
        _ = try await fenced.open(bench.server.signIn("alice"))
        let events = fenced.events(bufferSize: 100)
        let signingIn = bench.controller()
        _ = try await signingIn.open(bench.server.signIn("alice", expiresIn: 10))
        await signingIn.close()
        // The sign-in's write reaches the fenced session as a change notification: it adopts the record.
        try await withHangGuard("the fenced session adopts the sign-in's record") {
            for await event in events {
                if case .credentialsUpdated = event.kind { return }
            }
        }
        let adopted = fenced.credentials?.refreshToken == "alice~1/rt-0"
        #expect(adopted, "the fenced session holds the sign-in's credentials")

        bench.time.advance(by: 20)
        _ = try await fenced.accessToken()

        let sentTheAdoptedToken = bench.server.presented == ["alice~1/rt-0"]
        #expect(sentTheAdoptedToken, "one refresh, of the adopted record's refresh token")
        // What the next holder of the lease reads first, in any process: the rotation, not the token it spent.
        let storedTheRotation = bench.store.storedAtLeaseRelease.last == "alice~1/rt-1"
        #expect(storedTheRotation, "the store held the spent refresh token when the lease was released")
        await fenced.close()
    }

    /// Credentials handed over to a session whose record another process removed (the user signed out there) before
    /// this process heard of it: the write used to replace "whatever is stored", and so brought the record back.
    @Test func credentialsHandedOverAfterASignOutElsewhereDoNotBringTheRecordBack() async throws {
        let bench = Bench()
        let controller = bench.controller()
        _ = try await controller.open(bench.server.signIn("alice"))
        let events = controller.events(bufferSize: 100)
        // Another process signs her out. Its notification has not reached this process yet when the update writes.
        let otherProcess = bench.store.anotherProcess()
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
        let cameBack = bench.store.record("alice") != nil
        #expect(!cameBack, "the record of the user signed out elsewhere came back")
        // And the session closes, as when the notification of the removal arrives.
        try await withHangGuard("the session closes as cleared elsewhere") {
            for await event in events {
                if case .closed(.clearedElsewhere) = event.kind { return }
            }
        }
        #expect(!controller.session.isOpened)
    }
}
