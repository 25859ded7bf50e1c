import Foundation
import Testing

@testable import UserSessions

/// A service that fails the test if it is started twice without a stop in between, or stopped when not running.
private final class ExclusiveService: UserSessionService {
    let name: String
    private let state = Locked((running: false, starts: 0, stops: 0, violations: 0))

    init(name: String) { self.name = name }

    var counts: (starts: Int, stops: Int, violations: Int) {
        state.withLock { ($0.starts, $0.stops, $0.violations) }
    }
    var isRunning: Bool { state.withLock { $0.running } }

    func start(session: UserSession) async throws {
        state.withLock { state in
            if state.running { state.violations += 1 }
            state.running = true
            state.starts += 1
        }
        for _ in 0..<Int.random(in: 0...3) { await Task.yield() }
    }

    func stop(session: UserSession) async {
        for _ in 0..<Int.random(in: 0...3) { await Task.yield() }
        state.withLock { state in
            if !state.running { state.violations += 1 }
            state.running = false
            state.stops += 1
        }
    }
}

struct ControllerConcurrencyTests {
    @Test func hundredTasksCallingOpenCloseRestoreEndConsistent() async throws {
        for _ in 0..<5 {
            let services = [ExclusiveService(name: "a"), ExclusiveService(name: "b")]
            let controller = UserSessionController(store: InMemoryTokenStore(), services: services)
            let probe = EventProbe(controller)

            await withTaskGroup(of: Void.self) { group in
                for index in 0..<100 {
                    group.addTask {
                        switch index % 5 {
                        case 0, 1: _ = try? await controller.open(makePrototype("user\(index % 7)"))
                        case 2: await controller.close()
                        case 3: _ = try? await controller.restore()
                        default: _ = try? await controller.restore(identifier: "user\(index % 7)")
                        }
                    }
                }
            }

            let finalSession = controller.session
            await probe.wait { $0.last?.sequence == controller.hub.sequence }
            let events = probe.events
            #expect(events.first?.kind == .current)
            #expect(zip(events, events.dropFirst()).allSatisfy { $0.sequence + 1 == $1.sequence })
            #expect(events.last?.session == finalSession)

            // Opened and closed alternate, and each close is for the session that was open.
            #expect(events.contains { $0.kind == .opened })
            var open: String?
            for event in events.dropFirst() {
                switch event.kind {
                case .opened:
                    #expect(open == nil)
                    open = event.session.identifier
                case .closed(.rolledBack):
                    // A close that arrived while an open was starting services: the open never became `.opened`.
                    #expect(open == nil)
                case .invalidated:
                    Issue.record("unexpected \(event)")
                case .closed:
                    #expect(open == event.session.identifier)
                    open = nil
                default:
                    break
                }
            }
            #expect((open != nil) == (finalSession.state == .opened))

            for service in services {
                #expect(service.counts.violations == 0)
                #expect(service.isRunning == (finalSession.state == .opened))
            }
            await controller.shutdown()
            for service in services {
                let counts = service.counts
                #expect(counts.starts == counts.stops)
                #expect(counts.starts >= events.filter { $0.kind == .opened }.count)
            }
        }
    }

    @Test func callsFromOneTaskTakeEffectInCallOrder() async throws {
        let log = ServiceLog()
        let controller = UserSessionController(store: InMemoryTokenStore(), services: makeServices(2, log: log))
        let probe = EventProbe(controller)
        var expected: [UserSessionEvent.Kind] = []
        for round in 0..<50 {
            _ = try await controller.open(makePrototype("user\(round % 3)"))
            expected.append(round == 0 ? .opened : .closed(.replaced))
            if round > 0 { expected.append(.opened) }
            if round.isMultiple(of: 4) {
                await controller.close()
                expected.append(.closed(.requested))
                _ = try await controller.restore()
                expected.append(.opened)
            }
        }
        await controller.shutdown()
        expected.append(.closed(.shutdown))
        await probe.waitUntilFinished()
        #expect(probe.kinds == expected)
    }

    @Test func concurrentClosesDuringOpensNeverLeaveServicesRunning() async throws {
        for _ in 0..<20 {
            let services = [ExclusiveService(name: "a"), ExclusiveService(name: "b"), ExclusiveService(name: "c")]
            let controller = UserSessionController(store: InMemoryTokenStore(), services: services)
            await withTaskGroup(of: Void.self) { group in
                for index in 0..<40 {
                    group.addTask {
                        if index.isMultiple(of: 2) {
                            _ = try? await controller.open(makePrototype("user\(index)"))
                        } else {
                            await controller.close()
                        }
                    }
                }
            }
            await controller.close()
            #expect(controller.session.state != .opened)
            for service in services {
                #expect(service.counts.violations == 0)
                #expect(service.isRunning == false)
                #expect(service.counts.starts == service.counts.stops)
            }
            await controller.shutdown()
        }
    }
}
