import Foundation
import Testing

@testable import UserSessions

/// Issue 6, item 3: a store that throws, hangs or returns corrupt data at each call site in turn, during `open`,
/// `close`, `closeAndClear` and `restore`. Each (call site × fault) is one row; a row whose call site the operation
/// never reaches checks that the operation is unaffected. Every await on the controller is bounded by a hang
/// guard, so a hang fails the row instead of hanging the suite.
struct FaultInjectionLifecycleTests {
    // MARK: - open

    @Test(arguments: StoreCallSite.allCases, StoreFault.allCases)
    func openUnderStoreFault(site: StoreCallSite, fault: StoreFault) async throws {
        let rig = FaultRig()
        let controller = rig.controller
        rig.injectAtNextCall(site, fault)
        let prototype = rig.prototype()
        let opening = Task { try await controller.open(prototype) }
        let reached = site == .save || site == .saveCurrentIdentifier

        switch (reached, fault) {
        case (true, .hang), (true, .hangUntilCancelled):
            try await withHangGuard("the store hang") { await rig.store.hangs.wait(for: 1) }
            let closing = Task { await controller.close() }
            if fault == .hang {
                // The write ignores cancellation: the close waits its turn until the store answers.
                try await withHangGuard("the close parking") {
                    await yieldUntil { await controller.parkedCallCount == 1 }
                }
                rig.store.releaseHangs()
            }
            // A write that honours cancellation is cancelled by the close; either way the close wins.
            #expect(try await boundedResult("open", opening).errorCode == .openRolledBack)
            try await withHangGuard("close") { await closing.value }
            try await rig.waitForEvent(.closed(.rolledBack))
            #expect(rig.probe.kinds == [.closed(.rolledBack)])
            #expect(controller.session.state == .closed)
            #expect(rig.log.all.isEmpty)
            await #expect(throws: UserSessionError(.sessionNotOpen, "")) { try await controller.accessToken() }

        case (true, .fail):
            #expect(try await boundedResult("open", opening).errorCode == .storeFailure)
            #expect(controller.session.state == .undefined)
            #expect(rig.log.all.isEmpty)
            #expect(await rig.store.storedCurrentIdentifier == nil)
            await #expect(throws: UserSessionError(.sessionNotOpen, "")) { try await controller.accessToken() }
            // The fault left nothing behind: the next open works and is the first event.
            _ = try await withHangGuard("reopen") { try await controller.open(prototype) }
            try await rig.waitForEvent(.opened)
            #expect(rig.probe.kinds == [.opened])

        case (true, .corrupt):
            // A torn write the store cannot see: the open succeeds; the damage shows at the next restore.
            #expect(try await boundedResult("open", opening).isSuccess)
            try await withHangGuard("close") { await controller.close() }
            let restarted = rig.restarted()
            let restoring = Task { try await restarted.controller.restore() }
            #expect(try await boundedResult("restore", restoring).errorCode == .storeCorrupt)
            #expect(restarted.controller.session.state == .undefined)
            if site == .save {
                try await restarted.waitForEvent(.storeCorrupt(identifier: "user"))
                // Kept, not deleted.
                #expect(try await rig.store.base.load(identifier: "user") != nil)
            }

        case (false, _):
            #expect(try await boundedResult("open", opening).isSuccess)
            #expect(controller.session.state == .opened)
            #expect(try await controller.accessToken() == "at-0")
        }
        #expect(rig.store.injectedCount == (reached ? 1 : 0))
    }

    /// A write that never answers and ignores cancellation: the open cannot finish, and a close queued behind it
    /// waits with it (the contract keeps the order of lifecycle calls, and abandoning the write would let it land
    /// after a later `closeAndClear()`). Cancelling the open does not help either. The way out is the store
    /// answering; stores must bound their own I/O.
    @Test func openBlockedByAStoreThatIgnoresCancellationCompletesOnceTheStoreAnswers() async throws {
        let rig = FaultRig()
        let controller = rig.controller
        rig.injectAtNextCall(.save, .hang)
        let prototype = rig.prototype()
        let opening = Task { try await controller.open(prototype) }
        try await withHangGuard("the store hang") { await rig.store.hangs.wait(for: 1) }
        opening.cancel()
        let closing = Task { await controller.close() }
        try await withHangGuard("the close parking") { await yieldUntil { await controller.parkedCallCount == 1 } }
        #expect(controller.session.state == .undefined)
        rig.store.releaseHangs()
        #expect(try await boundedResult("open", opening).errorCode == .openRolledBack)
        try await withHangGuard("close") { await closing.value }
        #expect(controller.session.state == .closed)
        // The write that was in progress landed (before the close returned), as `close()` keeps stored data.
        #expect(await rig.storedRefreshToken == "rt-0")
    }

    /// A write that honours cancellation: cancelling the opening task ends the open with the store's error.
    @Test func cancellingAnOpenStuckInTheStoreFailsItWithoutOpening() async throws {
        let rig = FaultRig()
        let controller = rig.controller
        rig.injectAtNextCall(.saveCurrentIdentifier, .hangUntilCancelled)
        let prototype = rig.prototype()
        let opening = Task { try await controller.open(prototype) }
        try await withHangGuard("the store hang") { await rig.store.hangs.wait(for: 1) }
        opening.cancel()
        #expect(try await boundedResult("open", opening).errorCode == .storeFailure)
        #expect(controller.session.state == .undefined)
        #expect(rig.log.all.isEmpty)
    }

    // MARK: - close (with credentials that still need writing)

    /// Opens, refreshes while the store is down (the rotated credentials stay in memory), and lets the store
    /// recover, so that `close()` has one final write to make. Returns the faults injected so far.
    private func openWithUnwrittenCredentials(_ rig: FaultRig) async throws {
        let controller = rig.controller
        let prototype = rig.prototype(expiresIn: 10)
        _ = try await withHangGuard("open") { try await controller.open(prototype) }
        rig.injectAtNextCall(.save, .fail, persistent: true)
        #expect(try await withHangGuard("accessToken") { try await controller.accessToken() } == "at-1")
        try await rig.waitForEvent(.persistenceFailed)
        #expect(await rig.storedRefreshToken == "rt-0")
        rig.store.recover()
    }

    @Test func closeReturnsWhenTheStoreNeverAnswersAndIgnoresCancellation() async throws {
        let rig = FaultRig()
        let controller = rig.controller
        try await openWithUnwrittenCredentials(rig)
        rig.injectAtNextCall(.save, .hang)
        // Nobody releases the store: the close must still return, after two store deadlines, and say so.
        try await withHangGuard("close") { await controller.close() }
        #expect(controller.session.state == .closed)
        // The probe reads events on its own task: wait for the last one before counting.
        try await rig.waitForEvent(.closed(.requested))
        #expect(rig.count(.persistenceFailed) == 2)
        #expect(rig.probe.events.contains { $0.kind == .persistenceFailed && $0.detail?.contains("did not") == true })
        #expect(rig.log.names("stopped:") == ["0"])
        rig.store.releaseHangs()
    }

    @Test(arguments: StoreCallSite.allCases, StoreFault.allCases)
    func closeUnderStoreFault(site: StoreCallSite, fault: StoreFault) async throws {
        let rig = FaultRig()
        let controller = rig.controller
        try await openWithUnwrittenCredentials(rig)
        rig.injectAtNextCall(site, fault)
        let closing = Task { await controller.close() }
        // `close()` reaches the store only for the final write of the unwritten credentials.
        let reached = site == .save

        switch (reached, fault) {
        case (true, .fail):
            try await withHangGuard("close") { await closing.value }
            try await rig.waitForEvent(.closed(.requested))
            // The store is down when the session ends: reported; the credentials go with the session.
            #expect(rig.count(.persistenceFailed) == 2)
            #expect(await rig.storedRefreshToken == "rt-0")
        case (true, .hang):
            try await withHangGuard("the store hang") { await rig.store.hangs.wait(for: 1) }
            rig.store.releaseHangs()
            try await withHangGuard("close") { await closing.value }
            #expect(await rig.storedRefreshToken == "rt-1")
        case (true, .hangUntilCancelled):
            // The close gives the final write two store deadlines, then cancels it and returns on its own: the
            // overrun is reported. The write the cancellation made fail reports nothing after `.closed`.
            try await withHangGuard("the store hang") { await rig.store.hangs.wait(for: 1) }
            try await withHangGuard("close") { await closing.value }
            try await rig.waitForEvent(.closed(.requested))
            #expect(rig.count(.persistenceFailed) == 2)
            #expect(rig.probe.kinds.last == .closed(.requested))
            #expect(await rig.storedRefreshToken == "rt-0")
        case (true, .corrupt):
            try await withHangGuard("close") { await closing.value }
            rig.store.disarm()
            let restarted = rig.restarted()
            let restoring = Task { try await restarted.controller.restore() }
            #expect(try await boundedResult("restore", restoring).errorCode == .storeCorrupt)
        case (false, _):
            try await withHangGuard("close") { await closing.value }
            // The rotated credentials were written by the close, and a restart restores them.
            #expect(await rig.storedRefreshToken == "rt-1")
            rig.store.disarm()
            let restarted = rig.restarted()
            let restored = try await withHangGuard("restore") { try await restarted.controller.restore() }
            #expect(restored?.state == .opened)
            #expect(try await restarted.controller.accessToken() == "at-1")
        }
        try await rig.waitForEvent(.closed(.requested))
        #expect(controller.session.state == .closed)
        #expect(rig.log.names("stopped:") == ["0"])
        #expect(rig.store.injectedCount == 1 + (reached ? 1 : 0))
    }

    // MARK: - closeAndClear

    @Test(arguments: StoreCallSite.allCases, StoreFault.allCases)
    func closeAndClearUnderStoreFault(site: StoreCallSite, fault: StoreFault) async throws {
        let rig = FaultRig()
        let controller = rig.controller
        let prototype = rig.prototype()
        _ = try await withHangGuard("open") { try await controller.open(prototype) }
        rig.injectAtNextCall(site, fault)
        let clearing = Task { try await controller.closeAndClear() }
        let reached = [.loadCurrentIdentifier, .remove, .saveCurrentIdentifier].contains(site)

        switch (reached, fault) {
        case (true, .fail):
            #expect(try await boundedResult("closeAndClear", clearing).errorCode == .storeFailure)
            // What was not cleared yet is still there; clearing again (idempotent) finishes the job.
            #expect(await rig.store.storedCurrentIdentifier == "user")
            #expect(await (rig.store.stored("user") == nil) == (site == .saveCurrentIdentifier))
            try await withHangGuard("closeAndClear again") { try await controller.closeAndClear() }
            #expect(await rig.store.stored("user") == nil)
            #expect(await rig.store.storedCurrentIdentifier == nil)
        case (true, .hang):
            try await withHangGuard("the store hang") { await rig.store.hangs.wait(for: 1) }
            let closing = Task { await controller.close() }
            try await withHangGuard("the close parking") {
                await yieldUntil { await controller.parkedCallCount == 1 }
            }
            rig.store.releaseHangs()
            #expect(try await boundedResult("closeAndClear", clearing).isSuccess)
            try await withHangGuard("close") { await closing.value }
            #expect(await rig.store.stored("user") == nil)
            #expect(await rig.store.storedCurrentIdentifier == nil)
        case (true, .hangUntilCancelled):
            try await withHangGuard("the store hang") { await rig.store.hangs.wait(for: 1) }
            clearing.cancel()
            #expect(try await boundedResult("closeAndClear", clearing).errorCode == .storeFailure)
        case (true, .corrupt):
            #expect(try await boundedResult("closeAndClear", clearing).isSuccess)
            // The store lied; whatever it left behind reads back as a typed error, never as a session.
            let restarted = rig.restarted()
            let restoring = Task { try await restarted.controller.restore() }
            let restored = try await boundedResult("restore", restoring)
            switch site {
            case .loadCurrentIdentifier: #expect(restored.errorCode == .noStoredSession)
            case .saveCurrentIdentifier: #expect(restored.errorCode == .storeCorrupt)
            default: #expect(try restored.get() == nil)
            }
            #expect(await !restarted.controller.canRestore)
            if site == .remove {
                let byIdentifier = Task { try await restarted.controller.restore(identifier: "user") }
                #expect(try await boundedResult("restore", byIdentifier).errorCode == .storeCorrupt)
            }
            #expect(restarted.controller.session.state == .undefined)
        case (false, _):
            #expect(try await boundedResult("closeAndClear", clearing).isSuccess)
            #expect(await rig.store.stored("user") == nil)
            #expect(await rig.store.storedCurrentIdentifier == nil)
        }
        try await rig.waitForEvent(.closed(.cleared))
        #expect(rig.probe.kinds == [.opened, .closed(.cleared)])
        #expect(controller.session.state == .closed)
        #expect(rig.log.names("stopped:") == ["0"])
        #expect(rig.store.injectedCount == (reached ? 1 : 0))
    }

    // MARK: - restore (of expired credentials, which refreshes first)

    @Test(arguments: StoreCallSite.allCases, StoreFault.allCases)
    func restoreUnderStoreFault(site: StoreCallSite, fault: StoreFault) async throws {
        let first = FaultRig()
        let prototype = first.prototype()
        _ = try await withHangGuard("open") { try await first.controller.open(prototype) }
        try await withHangGuard("close") { await first.controller.close() }
        first.time.advance(by: 3601)
        let rig = first.restarted()
        let controller = rig.controller
        rig.injectAtNextCall(site, fault)
        let restoring = Task { try await controller.restore() }
        let reached = site != .remove
        // The refresh happens after the two reads.
        let refreshes = site == .save || site == .saveCurrentIdentifier || !reached || fault == .hang

        switch (reached, fault) {
        case (true, .fail):
            let result = try await boundedResult("restore", restoring)
            if site == .save {
                // The rotated credentials are in use although the store is down, and written once it is back.
                #expect(try result.get()?.state == .opened)
                try await rig.waitForEvent(.persistenceFailed)
                #expect(try await controller.accessToken() == "at-1")
                #expect(await rig.storedRefreshToken == "rt-0")
                rig.time.advance(by: 2)
                let saves = rig.store.savesDone.count
                #expect(try await controller.accessToken() == "at-1")
                try await withHangGuard("the write retry") { await rig.store.savesDone.wait(for: saves + 1) }
                #expect(await rig.storedRefreshToken == "rt-1")
            } else {
                #expect(result.errorCode == .storeFailure)
                #expect(controller.session.state == .undefined)
            }
        case (true, .hang):
            try await withHangGuard("the store hang") { await rig.store.hangs.wait(for: 1) }
            rig.store.releaseHangs()
            #expect(try await boundedResult("restore", restoring).get()?.state == .opened)
            #expect(try await controller.accessToken() == "at-1")
        case (true, .hangUntilCancelled):
            try await withHangGuard("the store hang") { await rig.store.hangs.wait(for: 1) }
            restoring.cancel()
            let result = try await boundedResult("restore", restoring)
            #expect(!result.isSuccess)
            #expect(controller.session.state == .undefined)
            if site == .save {
                // The refresh returned rotated credentials and the restore gave up while they were being written:
                // the rollback's final write stores them, so the server's rotation is not lost.
                #expect(rig.refresher.validRefreshToken == "rt-1")
                #expect(await rig.storedRefreshToken == "rt-1")
            }
        case (true, .corrupt):
            let result = try await boundedResult("restore", restoring)
            switch site {
            case .load:
                #expect(result.errorCode == .storeCorrupt)
                try await rig.waitForEvent(.storeCorrupt(identifier: "user"))
                #expect(try await rig.store.base.load(identifier: "user") != nil)
            case .loadCurrentIdentifier:
                #expect(result.errorCode == .storeCorrupt)
            default:
                // A torn write: the restore succeeds; the next restore after a restart sees the damage.
                #expect(try result.get()?.state == .opened)
                try await withHangGuard("close") { await controller.close() }
                let again = Task { try await rig.restarted().controller.restore() }
                #expect(try await boundedResult("restore", again).errorCode == .storeCorrupt)
            }
        case (false, _):
            #expect(try await boundedResult("restore", restoring).get()?.state == .opened)
            #expect(try await controller.accessToken() == "at-1")
            #expect(await rig.storedRefreshToken == "rt-1")
        }
        #expect(rig.refresher.calls == (refreshes ? 1 : 0))
        // Whatever happened, the store never holds a refresh token the server no longer accepts while the
        // controller holds none (the cancelled-commit row above is the known exception).
        if rig.refresher.calls == 1, controller.session.state != .opened, fault != .corrupt,
            !(site == .save && fault == .hangUntilCancelled)
        {
            #expect(await rig.storedRefreshToken == rig.refresher.validRefreshToken)
        }
        #expect(rig.store.injectedCount == (reached ? 1 : 0))
    }
}
