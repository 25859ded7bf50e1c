import Foundation
import Testing

@testable import UserSessions

struct ServiceTests {
    @Test func servicesStartInRegistrationOrderUnderRandomizedDurations() async throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20 {
            let log = ServiceLog()
            let services = makeServices(8, log: log) { _, service in
                service.startYields = Int.random(in: 0...20, using: &generator)
            }
            let controller = UserSessionController(store: InMemoryTokenStore(), services: services)
            _ = try await controller.open(makePrototype("alice"))
            let expected = (0..<8).flatMap { ["start:\($0)", "started:\($0)"] }
            #expect(log.all == expected)
            await controller.shutdown()
            #expect(log.names("stop:") == (0..<8).reversed().map { "\($0)" })
        }
    }

    @Test func aFailingServiceRollsBackInReverseAndEndsInvalid() async throws {
        let log = ServiceLog()
        let services = makeServices(5, log: log) { index, service in
            if index == 3 { service.startFailure = ServiceBoom() }
        }
        let store = InMemoryTokenStore()
        let controller = UserSessionController(store: store, services: services)
        let probe = EventProbe(controller)

        let error = await #expect(throws: UserSessionError.self) { try await controller.open(makePrototype("alice")) }

        #expect(error?.code == .serviceStartFailed)
        #expect(error?.serviceName == "3")
        #expect(error?.underlying is ServiceBoom)
        #expect(log.names("started:") == ["0", "1", "2"])
        #expect(log.names("stop:") == ["2", "1", "0"])
        #expect(!log.names("stop:").contains("3"))
        #expect(controller.session.state == .invalid)
        #expect(controller.session.identifier == "alice")
        #expect(controller.credentials == nil)
        await probe.wait { $0.count == 3 }
        #expect(probe.kinds == [.serviceStartFailed(service: "3"), .invalidated(.serviceStartFailed(service: "3"))])
        #expect(probe.events.dropFirst().allSatisfy { $0.session.state == .invalid })
        #expect(!probe.kinds.contains(.opened))
        await controller.shutdown()
    }

    @Test func cancellingTheOpeningTaskFailsTheServiceBeingStarted() async throws {
        let log = ServiceLog()
        let hold = CancellableHold()
        let arrivals = ArrivalCounter()
        let services = makeServices(4, log: log) { index, service in
            if index == 2 {
                service.startHold = hold
                service.startArrivals = arrivals
            }
        }
        let controller = UserSessionController(store: InMemoryTokenStore(), services: services)
        let opening = Task { try await controller.open(makePrototype("alice")) }
        await arrivals.wait(for: 1)

        opening.cancel()
        let result = await opening.result

        guard case .failure(let failure) = result, let error = failure as? UserSessionError else {
            Issue.record("expected a UserSessionError, got \(result)")
            return
        }
        #expect(error.code == .serviceStartFailed)
        #expect(error.serviceName == "2")
        #expect(error.underlying is CancellationError)
        #expect(log.names("stop:") == ["1", "0"])
        #expect(controller.session.state == .invalid)
        await controller.shutdown()
    }

    @Test func servicesStopInReverseOrderOnClose() async throws {
        let log = ServiceLog()
        let controller = UserSessionController(store: InMemoryTokenStore(), services: makeServices(5, log: log))
        _ = try await controller.open(makePrototype("alice"))

        await controller.close()

        #expect(log.names("stop:") == ["4", "3", "2", "1", "0"])
        #expect(log.names("stopped:") == ["4", "3", "2", "1", "0"])
        await controller.shutdown()
    }

    @Test func stoppingRunsToTheEndWhenTheClosingTaskIsCancelled() async throws {
        let log = ServiceLog()
        let gate = AsyncGate()
        let arrivals = ArrivalCounter()
        let services = makeServices(4, log: log) { index, service in
            if index == 3 {
                service.stopGate = gate
                service.stopArrivals = arrivals
            }
        }
        let controller = UserSessionController(store: InMemoryTokenStore(), services: services)
        let probe = EventProbe(controller)
        _ = try await controller.open(makePrototype("alice"))

        let closing = Task { await controller.close() }
        await arrivals.wait(for: 1)
        closing.cancel()
        gate.open()
        await closing.value

        #expect(log.names("stopped:") == ["3", "2", "1", "0"])
        #expect(controller.session.state == .closed)
        await probe.wait(for: .closed(.requested))
        #expect(!probe.kinds.contains { if case .serviceStopOverran = $0 { true } else { false } })
        await controller.shutdown()
    }

    @Test func aStopThatNeverReturnsIsLeftBehindAfterItsDeadline() async throws {
        let log = ServiceLog()
        let neverOpened = AsyncGate()
        let services = makeServices(3, log: log) { index, service in
            if index == 1 { service.stopGate = neverOpened }
        }
        // The stop deadline runs on a manual clock: the overrun is decided by advancing it, not by real time.
        let time = ManualTime()
        var configuration = UserSessionController.Configuration(serviceStopTimeout: .seconds(10))
        configuration.deadlineClock = time.deadlineClock
        let controller = UserSessionController(
            store: InMemoryTokenStore(), services: services, configuration: configuration)
        let probe = EventProbe(controller)
        _ = try await controller.open(makePrototype("alice"))

        let closing = Task { await controller.close() }
        // Service 2 stops at once (its deadline's timer is cancelled with it); service 1's stop hangs and its
        // deadline is then the one timer sleeping on the clock.
        try await withHangGuard("the stop deadline of service 1") {
            while !(log.names("stop:").contains("1") && time.sleeperCount == 1) { await Task.yield() }
        }
        time.advance(by: 10)
        await closing.value

        #expect(controller.session.state == .closed)
        #expect(log.names("stop:") == ["2", "1", "0"])
        #expect(log.names("stopped:") == ["2", "0"])
        await probe.wait(for: .closed(.requested))
        #expect(probe.kinds == [.opened, .serviceStopOverran(service: "1"), .closed(.requested)])
        neverOpened.open()
        await controller.shutdown()
    }

    @Test func registeredServicesApplyFromTheNextOpen() async throws {
        let log = ServiceLog()
        let controller = UserSessionController(store: InMemoryTokenStore(), services: makeServices(1, log: log))
        _ = try await controller.open(makePrototype("alice"))

        await controller.register(RecordingService("late", log: log))
        #expect(log.names("start:") == ["0"])
        await controller.close()
        #expect(log.names("stop:") == ["0"])

        _ = try await controller.restore()
        #expect(log.names("start:") == ["0", "0", "late"])
        await controller.close()
        #expect(log.names("stop:") == ["0", "late", "0"])
        await controller.shutdown()
    }

    @Test func closeDuringOpenRollsTheOpenBack() async throws {
        let log = ServiceLog()
        let hold = CancellableHold()
        let arrivals = ArrivalCounter()
        let services = makeServices(3, log: log) { index, service in
            if index == 1 {
                service.startHold = hold
                service.startArrivals = arrivals
            }
        }
        let store = InMemoryTokenStore()
        let controller = UserSessionController(store: store, services: services)
        let probe = EventProbe(controller)
        let opening = Task { try await controller.open(makePrototype("alice")) }
        await arrivals.wait(for: 1)

        await controller.close()

        await #expect(throws: UserSessionError(.openRolledBack, "")) { try await opening.value }
        #expect(log.names("start:") == ["0", "1"])
        #expect(log.names("stop:") == ["0"])
        #expect(controller.session.state == .closed)
        #expect(controller.session.identifier == "alice")
        #expect(controller.credentials == nil)
        #expect(try await store.load(identifier: "alice") != nil)
        await controller.shutdown()
        await probe.waitUntilFinished()
        #expect(probe.kinds == [.closed(.rolledBack)])
    }

    @Test func closeDuringOpenStopsAServiceThatStartedDespiteCancellation() async throws {
        let log = ServiceLog()
        let gate = AsyncGate()
        let arrivals = ArrivalCounter()
        let services = makeServices(3, log: log) { index, service in
            if index == 1 {
                service.stubbornStartGate = gate
                service.startArrivals = arrivals
            }
        }
        let controller = UserSessionController(store: InMemoryTokenStore(), services: services)
        let opening = Task { try await controller.open(makePrototype("alice")) }
        await arrivals.wait(for: 1)

        let closing = Task { await controller.close() }
        await yieldUntil { await controller.parkedCallCount == 1 }
        gate.open()

        await #expect(throws: UserSessionError(.openRolledBack, "")) { try await opening.value }
        await closing.value
        #expect(log.names("started:") == ["0", "1"])
        #expect(log.names("stop:") == ["1", "0"])
        #expect(controller.session.state == .closed)
        await controller.shutdown()
    }

    @Test func shutdownDuringOpenRollsBackThenFinishes() async throws {
        let log = ServiceLog()
        let hold = CancellableHold()
        let arrivals = ArrivalCounter()
        let services = makeServices(2, log: log) { index, service in
            if index == 1 {
                service.startHold = hold
                service.startArrivals = arrivals
            }
        }
        let controller = UserSessionController(store: InMemoryTokenStore(), services: services)
        let probe = EventProbe(controller)
        let opening = Task { try await controller.open(makePrototype("alice")) }
        await arrivals.wait(for: 1)

        await controller.shutdown()

        await #expect(throws: UserSessionError(.openRolledBack, "")) { try await opening.value }
        await probe.waitUntilFinished()
        #expect(probe.kinds == [.closed(.rolledBack)])
        #expect(log.names("stop:") == ["0"])
    }

    @Test func opensQueuedBehindAnOpenTakeEffectInCallOrder() async throws {
        let log = ServiceLog()
        let hold = CancellableHold()
        let arrivals = ArrivalCounter()
        let controller = UserSessionController(store: InMemoryTokenStore())
        let probe = EventProbe(controller)
        await controller.register(
            {
                var service = RecordingService("held", log: log)
                service.startHold = hold
                service.startArrivals = arrivals
                return service
            }())
        let first = Task { try await controller.open(makePrototype("alice")) }
        await arrivals.wait(for: 1)
        let second = Task { try await controller.open(makePrototype("bob")) }
        await yieldUntil { await controller.parkedCallCount == 1 }
        hold.release()

        let alice = try await first.value
        let bob = try await second.value
        #expect(alice.identifier == "alice")
        #expect(bob.identifier == "bob")
        #expect(controller.session.identifier == "bob")
        await controller.shutdown()
        await probe.waitUntilFinished()
        #expect(probe.kinds == [.opened, .closed(.replaced), .opened, .closed(.shutdown)])
        #expect(probe.events.dropFirst().map(\.session.identifier) == ["alice", "alice", "bob", "bob"])
    }
}

/// A service whose `start` reports a terminal credentials failure for the session being opened, as the credentials
/// gate would when a service asks for a token and the refresh token was revoked.
private struct RevokingService: UserSessionService {
    let controller: UserSessionController
    var name: String { "revoking" }

    func start(session: UserSession) async throws {
        let generation = await controller.generation
        await controller.invalidate(generation: generation, reason: .credentialsRevoked)
    }

    func stop(session: UserSession) async {}
}

struct ServiceInvalidationTests {
    @Test func aTerminalFailureWhileServicesStartFailsTheOpenWithoutDeadlock() async throws {
        let log = ServiceLog()
        let store = InMemoryTokenStore()
        let controller = UserSessionController(store: store, services: makeServices(2, log: log))
        await controller.register(RevokingService(controller: controller))
        await controller.register(RecordingService("after", log: log))
        let probe = EventProbe(controller)

        let error = await #expect(throws: UserSessionError.self) { try await controller.open(makePrototype("alice")) }

        #expect(error?.code == .refreshFailed)
        #expect(error?.failureClass == .terminal)
        #expect(controller.session.state == .invalid)
        #expect(log.names("start:") == ["0", "1"])
        #expect(log.names("stop:") == ["1", "0"])
        #expect(try await store.load(identifier: "alice") != nil)
        await controller.shutdown()
        await probe.waitUntilFinished()
        #expect(probe.kinds == [.invalidated(.credentialsRevoked)])
    }
}
