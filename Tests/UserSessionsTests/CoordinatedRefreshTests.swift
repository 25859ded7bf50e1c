import Foundation
import Testing

@testable import UserSessions

/// The gate over a ``CoordinatedTokenStore``, with a scripted store that plays the other processes: read-first
/// adoption under the lease, conditional commits and their conflicts, change notifications, and a lease held
/// elsewhere. No sleeps: gates, arrival counters and the events the gate emits order everything.
@Suite struct CoordinatedRefreshTests {
    /// A gate over a ``ScriptedCoordinatedStore`` whose record of `user` holds `at-0`/`rt-0`.
    final class Rig: CredentialsGateOwner {
        let time = ManualTime()
        let store = ScriptedCoordinatedStore()
        let refresher: ScriptedRefresher
        let hub = EventHub(defaultBufferSize: 10_000)
        let gate: CredentialsGate
        let events: AsyncStream<UserSessionEvent>
        let removals = ArrivalCounter()
        let revision: UInt64

        func ledgerAdvanced(_ identifier: String) { gate.ledgerAdvanced(identifier) }

        init(steps: [ScriptedRefresher.Step] = [], expiresIn: TimeInterval) {
            let time = self.time
            refresher = ScriptedRefresher(steps: steps, now: { time.now })
            gate = CredentialsGate(
                refresher: refresher, store: store, events: hub,
                policy: UserSessionController.Configuration(clock: time.clock).refreshPolicy)
            events = hub.subscribe(bufferSize: 10_000)
            revision = store.writeElsewhere(
                Self.session(Self.credentials("0", expiresAt: time.now + expiresIn)), identifier: "user")
            gate.setOwner(self)
            gate.activate(
                identifier: "user", userInfo: UserInfo(id: "user"),
                credentials: Self.credentials("0", expiresAt: time.now + expiresIn), generation: 1, revision: revision)
        }

        func credentialsRevoked(generation: UInt64) async {}

        /// The gate's call up when the record was removed elsewhere: counted.
        func recordRemovedElsewhere(generation: UInt64) async { removals.arrive() }

        static func credentials(_ tag: String, expiresAt: Date) -> Credentials {
            Credentials(accessToken: "at-\(tag)", refreshToken: "rt-\(tag)", expiresAt: expiresAt)
        }

        static func session(_ credentials: Credentials) -> StoredSession {
            StoredSession(userInfo: UserInfo(id: "user"), credentials: credentials)
        }

        /// Another process rotates the credentials to `at-<tag>`, valid for an hour.
        @discardableResult
        func rotateElsewhere(_ tag: String, notify: Bool = false) -> UInt64 {
            store.writeElsewhere(
                Self.session(Self.credentials(tag, expiresAt: time.now + 3600)), identifier: "user", notify: notify)
        }

        /// Reads events until one matches, returning every kind seen up to it.
        func kinds(until match: (UserSessionEvent.Kind) -> Bool) async -> [UserSessionEvent.Kind] {
            var seen: [UserSessionEvent.Kind] = []
            for await event in events where event.kind != .current {
                seen.append(event.kind)
                if match(event.kind) { break }
            }
            return seen
        }
    }

    static func isAdoption(_ kind: UserSessionEvent.Kind) -> Bool {
        if case .credentialsUpdated(let change) = kind { return change.adoptedFromStore }
        return false
    }

    @Test func aNewerRecordIsAdoptedUnderTheLeaseWithoutCallingTheRefresher() async throws {
        let rig = Rig(expiresIn: -1)
        let newer = rig.rotateElsewhere("x")
        #expect(try await rig.gate.accessToken() == "at-x")
        #expect(rig.refresher.calls == 0)
        #expect(rig.store.leaseAcquisitions == 1)
        #expect(rig.gate.inspect { $0.heldRevision } == newer)
        let kinds = await rig.kinds(until: Self.isAdoption)
        #expect(kinds.contains(.refreshStarted))
        #expect(!kinds.contains(.credentialsRefreshed))
        #expect(rig.store.conditionalSaves.isEmpty, "adopting writes nothing")
    }

    @Test func aRecordThatIsNotNewerIsRefreshedAndCommittedOnTheRevisionHeld() async throws {
        let rig = Rig(expiresIn: -1)
        #expect(try await rig.gate.accessToken() == "at-1")
        #expect(rig.refresher.calls == 1)
        let saves = rig.store.conditionalSaves
        #expect(saves.count == 1)
        #expect(saves.first?.expected == rig.revision)
        let stored = try #require(rig.store.record("user"))
        #expect(stored.session.credentials?.accessToken == "at-1")
        #expect(rig.gate.inspect { $0.heldRevision } == stored.revision)
    }

    @Test func aConflictOnCommitAdoptsTheNewerStoredCredentialsAndKeepsThem() async throws {
        let blocker = AsyncGate()
        let rig = Rig(steps: [.block(blocker, then: .succeed)], expiresIn: -1)
        let waiter = Task { try await rig.gate.accessToken() }
        await rig.refresher.started.wait(for: 1)
        // Another process writes while this one refreshes (as after a lease that expired under it).
        rig.rotateElsewhere("y")
        blocker.open()
        #expect(try await waiter.value == "at-y")
        #expect(rig.store.record("user")?.session.credentials?.accessToken == "at-y", "the newer record stands")
        #expect(rig.gate.currentCredentials()?.accessToken == "at-y")
        let kinds = await rig.kinds(until: Self.isAdoption)
        #expect(!kinds.contains(.credentialsRefreshed))
    }

    /// The ledger retries a commit the store refused while the session still holds the identifier, and its write
    /// moves the record's revision past the one the session holds. The session's next commit finds a record holding
    /// a refresh token the ledger knows was spent: it is older than the commit, which writes over it instead of being
    /// superseded by it (before, the commit failed with `revisionConflict` and its waiters with it).
    @Test func aCommitAfterTheLedgersRetryWroteTheRecordWritesOverIt() async throws {
        let rig = Rig(expiresIn: -1)
        rig.store.failNextSaves(1)
        let sleeps = rig.time.sleeps.count
        #expect(try await rig.gate.accessToken() == "at-1")
        #expect(rig.store.record("user")?.session.credentials?.refreshToken == "rt-0")
        // The ledger's retry writes rt-1 over rt-0, conditionally on the record it replaces.
        try await withHangGuard("the retry's wait") { await rig.time.sleeps.wait(for: sleeps + 1) }
        rig.time.advance(by: 1)
        let store = rig.store
        try await withHangGuard("the retry") {
            while store.record("user")?.session.credentials?.refreshToken != "rt-1" { await Task.yield() }
        }
        #expect(rig.gate.inspect { $0.heldRevision } == rig.revision, "the session still holds the first revision")

        rig.time.advance(by: 3600)
        #expect(try await rig.gate.accessToken() == "at-2")
        #expect(rig.store.record("user")?.session.credentials?.refreshToken == "rt-2")
        #expect(rig.refresher.calls == 2)
    }

    @Test func aConflictWithTheRecordItWasBasedOnIsWrittenOverOnTheNewRevision() async throws {
        let rig = Rig(expiresIn: -1)
        rig.store.conflictOnNextConditionalSave()
        #expect(try await rig.gate.accessToken() == "at-1")
        let saves = rig.store.conditionalSaves
        #expect(saves.count == 2)
        #expect(saves.last?.revision != nil)
        #expect(rig.store.record("user")?.session.credentials?.accessToken == "at-1", "the rotated token is kept")
    }

    @Test func aLeaseHeldElsewhereDelaysTheRefreshWhichThenAdoptsWhatTheHolderStored() async throws {
        let rig = Rig(expiresIn: -1)
        rig.store.holdLeaseElsewhere("user")
        let waiter = Task { try await rig.gate.accessToken() }
        await rig.store.leaseWaits.wait(for: 1)
        #expect(rig.refresher.calls == 0)
        rig.rotateElsewhere("z")
        rig.store.releaseLeaseElsewhere("user")
        #expect(try await waiter.value == "at-z")
        #expect(rig.refresher.calls == 0)
    }

    /// Found by the fleet benchmark over PostgreSQL: a change notification adopted another process's rotation
    /// while the leased flight was reading the record; the flight, superseded but unaware, then presented the spent
    /// refresh token, and the server revoked the token family.
    @Test func aFlightSupersededByANotificationWhileReadingTheRecordSendsNothing() async throws {
        let rig = Rig(expiresIn: -1)
        await rig.store.subscriptions.wait(for: 1)
        let read = AsyncGate()
        rig.store.pauseNextRead(until: read)
        let waiter = Task { try await rig.gate.accessToken() }
        await rig.store.pausedReads.wait(for: 1)
        rig.rotateElsewhere("n", notify: true)
        #expect(try await waiter.value == "at-n", "the waiter gets the adopted credentials")
        read.open()
        await rig.store.leaseReleases.wait(for: 1)
        #expect(rig.refresher.calls == 0, "the spent rt-0 was never presented")
        #expect(rig.store.record("user")?.session.credentials?.accessToken == "at-n")
        #expect(rig.store.conditionalSaves.isEmpty)
    }

    /// Found by the PostgreSQL fleet test (a node counted 4 refreshes and 1 adoption for 5 expiries): the store's
    /// notification of the commit's own write can come, and be read, after the write turn is handed on but before
    /// the commit publishes. The record is then the newest this process knows while the refresh is in flight: not
    /// news. Adopted, it made the flight stale, so its refresh was never reported.
    @Test func theNotificationOfACommitsOwnWriteBeforeItPublishesIsNotAdopted() async throws {
        let rig = Rig(expiresIn: -1)
        await rig.store.subscriptions.wait(for: 1)
        let commit = AsyncGate()
        let probe = rig.gate.backgroundTasks
        probe.holdNextCommit(until: commit)
        let waiter = Task { try await rig.gate.accessToken() }
        await probe.heldCommits.wait(for: 1)
        let written = try #require(rig.store.record("user"))
        #expect(written.session.credentials?.accessToken == "at-1", "the commit's write landed")
        // The notification of that write is read while the commit waits to publish (the read is held so that the
        // watch has the turn and has read the session's credentials before the test goes on).
        let read = AsyncGate()
        rig.store.pauseNextRead(until: read)
        rig.store.send(.saved(identifier: "user", revision: written.revision))
        await rig.store.pausedReads.wait(for: 1)
        // A second change, handled after the first: once its read is held, the first one's handling is over.
        let next = AsyncGate()
        rig.store.pauseNextRead(until: next)
        rig.store.send(.resynchronize)
        read.open()
        await rig.store.pausedReads.wait(for: 2)
        commit.open()
        #expect(try await waiter.value == "at-1")
        let kinds = await rig.kinds { kind in
            if case .credentialsRefreshed = kind { return true }
            return Self.isAdoption(kind)
        }
        #expect(kinds.last == .credentialsRefreshed, "the refresh is reported, not adopted from the store: \(kinds)")
        #expect(rig.gate.inspect { $0.heldRevision } == written.revision)
        next.open()
        #expect(rig.refresher.calls == 1)
    }

    @Test func aSavedNotificationWithANewerRevisionIsAdoptedWithoutRefreshing() async throws {
        let rig = Rig(expiresIn: 3600)
        await rig.store.subscriptions.wait(for: 1)
        rig.rotateElsewhere("n", notify: true)
        let kinds = await rig.kinds(until: Self.isAdoption)
        #expect(kinds.count == 1)
        #expect(rig.gate.currentCredentials()?.accessToken == "at-n")
        #expect(rig.refresher.calls == 0)
    }

    @Test func aNotificationOfTheRevisionAlreadyHeldChangesNothing() async throws {
        let rig = Rig(expiresIn: 3600)
        await rig.store.subscriptions.wait(for: 1)
        rig.store.send(.saved(identifier: "user", revision: rig.revision))
        rig.store.send(.saved(identifier: "someone-else", revision: 99))
        // A resynchronization after them is handled in order; it finds the record unchanged.
        rig.rotateElsewhere("r")
        rig.store.send(.resynchronize)
        let kinds = await rig.kinds(until: Self.isAdoption)
        #expect(kinds.count == 1)
        #expect(rig.gate.currentCredentials()?.accessToken == "at-r")
    }

    @Test func aResynchronizationAdoptsWhatWasMissed() async throws {
        let rig = Rig(expiresIn: 3600)
        await rig.store.subscriptions.wait(for: 1)
        rig.rotateElsewhere("m")
        rig.store.send(.resynchronize)
        _ = await rig.kinds(until: Self.isAdoption)
        #expect(rig.gate.currentCredentials()?.accessToken == "at-m")
    }

    @Test func aRemovedNotificationStopsTheSessionAndWritesNothingBack() async throws {
        let rig = Rig(expiresIn: 3600)
        await rig.store.subscriptions.wait(for: 1)
        rig.store.removeElsewhere("user", notify: true)
        await rig.removals.wait(for: 1)
        await #expect(throws: UserSessionError(.sessionNotOpen, "")) { try await rig.gate.refresh() }
        await rig.gate.deactivate()
        #expect(rig.store.record("user") == nil)
        #expect(rig.refresher.calls == 0)
    }

    @Test func aRecordRemovedBeforeTheRefreshStopsItWithoutSendingTheToken() async throws {
        let rig = Rig(expiresIn: -1)
        rig.store.removeElsewhere("user")
        await #expect(throws: UserSessionError(.sessionNotOpen, "")) { try await rig.gate.accessToken() }
        await rig.removals.wait(for: 1)
        #expect(rig.refresher.calls == 0)
    }

    @Test func theControllerClosesASessionClearedElsewhereWithItsOwnReason() async throws {
        let store = ScriptedCoordinatedStore()
        let controller = UserSessionController(store: store, refresher: ScriptedRefresher())
        let events = controller.events()
        _ = try await controller.open(
            UserSessionPrototype(
                identifier: "user", userInfo: UserInfo(id: "user"),
                credentials: Rig.credentials("0", expiresAt: Date() + 3600)))
        #expect(store.record("user") != nil)
        await store.subscriptions.wait(for: 1)
        store.removeElsewhere("user", notify: true)
        for await event in events where event.kind == .closed(.clearedElsewhere) { break }
        #expect(controller.session.state == .closed)
        #expect(store.record("user") == nil, "nothing is written back")
        #expect("\(UserSessionEvent.Kind.closed(.clearedElsewhere))" == "closed(clearedElsewhere)")
        let adopted = UserSessionEvent.CredentialsChange(extended: true, adoptedFromStore: true)
        #expect(
            "\(UserSessionEvent.Kind.credentialsUpdated(adopted))" == "credentialsUpdated(adoptedFromStore, extended)")
    }

    /// An open writes over whatever is stored, conditionally on the revision it read: a conflict makes it read the
    /// revision again and retry, and conflicts that never end fail the open with a typed error after a bounded
    /// number of attempts, opening nothing.
    @Test func anOpeningWriteRetriesAConflictAndGivesUpOnEndlessConflicts() async throws {
        let prototype = UserSessionPrototype(
            identifier: "user", userInfo: UserInfo(id: "user"),
            credentials: Rig.credentials("1", expiresAt: Date() + 3600))
        let store = ScriptedCoordinatedStore()
        store.writeElsewhere(Rig.session(Rig.credentials("0", expiresAt: Date() + 3600)), identifier: "user")
        store.conflictOnNextConditionalSave()
        let controller = UserSessionController(store: store, refresher: ScriptedRefresher())
        _ = try await controller.open(prototype)
        #expect(store.conditionalSaves.map(\.revision) == [nil, 2])
        #expect(store.record("user")?.session.credentials?.accessToken == "at-1")
        #expect(controller.gate.inspect { $0.heldRevision } == 2)
        await controller.close()

        let endless = ScriptedCoordinatedStore()
        endless.conflictOnEveryConditionalSave()
        let refused = UserSessionController(store: endless, refresher: ScriptedRefresher())
        let error = await #expect(throws: UserSessionError.self) { try await refused.open(prototype) }
        #expect(error?.code == .revisionConflict)
        #expect(endless.conditionalSaves.count == CredentialsGate.conditionalWriteAttempts)
        #expect(refused.session.state != .opened)
        #expect(endless.record("user") == nil)
    }

    @Test func aRestoredSessionHoldsTheRevisionItWasReadAt() async throws {
        let store = ScriptedCoordinatedStore()
        let revision = store.writeElsewhere(
            Rig.session(Rig.credentials("0", expiresAt: Date() + 3600)), identifier: "user")
        let controller = UserSessionController(store: store, refresher: ScriptedRefresher())
        _ = try await controller.restore(identifier: "user")
        #expect(controller.gate.inspect { $0.heldRevision } == revision)
        await controller.close()
    }
}

/// The fallback for stores without coordination: after `invalid_grant`, a refresh token another process already
/// rotated into the store is adopted (or used once) before the session is declared invalid.
@Suite struct InvalidGrantFallbackTests {
    static func stored(_ tag: String, expiresAt: Date) -> StoredSession {
        StoredSession(
            userInfo: UserInfo(id: "user"),
            credentials: Credentials(accessToken: "at-\(tag)", refreshToken: "rt-\(tag)", expiresAt: expiresAt))
    }

    @Test func aValidRotatedTokenInTheStoreIsAdoptedInsteadOfInvalidating() async throws {
        let harness = RefreshHarness(steps: [ScriptedRefresher.failure(.terminal)])
        try await harness.store.save(Self.stored("9", expiresAt: harness.time.now + 3600), identifier: "user")
        harness.activate(expiresIn: -1)
        #expect(try await harness.gate.accessToken() == "at-9")
        #expect(harness.refreshCalls == 1)
        #expect(harness.terminalCalls.count == 0)
        let kinds = await harness.recordedEvents().map(\.kind)
        #expect(kinds.contains { CoordinatedRefreshTests.isAdoption($0) })
        #expect(!kinds.contains(.refreshFailed(.terminal)))
    }

    @Test func anExpiredRotatedTokenInTheStoreIsRefreshedOnce() async throws {
        let harness = RefreshHarness(steps: [ScriptedRefresher.failure(.terminal), .succeed])
        try await harness.store.save(Self.stored("9", expiresAt: harness.time.now - 1), identifier: "user")
        harness.activate(expiresIn: -1)
        #expect(try await harness.gate.accessToken() == "at-2")
        #expect(harness.refresher?.received.map(\.refreshToken) == ["rt-0", "rt-9"])
        #expect(harness.store.stored("user")?.credentials?.accessToken == "at-2")
    }

    @Test func theRetryIsMadeOnlyOnceAndItsFailureInvalidates() async throws {
        let harness = RefreshHarness(steps: [
            ScriptedRefresher.failure(.terminal), ScriptedRefresher.failure(.terminal),
        ])
        try await harness.store.save(Self.stored("9", expiresAt: harness.time.now - 1), identifier: "user")
        harness.activate(expiresIn: -1)
        await #expect(throws: UserSessionError(.refreshFailed, "")) { try await harness.gate.accessToken() }
        #expect(harness.refreshCalls == 2)
        await harness.terminalCalls.wait(for: 1)
    }

    @Test func theSameRefreshTokenInTheStoreIsNotRetried() async throws {
        let harness = RefreshHarness(steps: [ScriptedRefresher.failure(.terminal)])
        try await harness.store.save(Self.stored("0", expiresAt: harness.time.now - 1), identifier: "user")
        harness.activate(expiresIn: -1)
        await #expect(throws: UserSessionError(.refreshFailed, "")) { try await harness.gate.accessToken() }
        #expect(harness.refreshCalls == 1)
    }
}
