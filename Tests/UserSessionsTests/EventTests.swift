import Foundation
import Testing

@testable import UserSessions

struct EventTests {
    @Test func firstElementDescribesTheCurrentSession() async throws {
        let controller = UserSessionController(store: InMemoryTokenStore())
        _ = try await controller.open(makePrototype("alice"))
        let probe = EventProbe(controller)
        await probe.wait { !$0.isEmpty }
        let first = try #require(probe.events.first)
        #expect(first.kind == .current)
        #expect(first.session.state == .opened)
        #expect(first.session.identifier == "alice")
        #expect(first.sequence == 1)
        await controller.shutdown()
    }

    @Test func thousandSubscribersSeeTheSameOrderedTransitions() async throws {
        let controller = UserSessionController(store: InMemoryTokenStore())
        let streams = (0..<1000).map { _ in controller.events(bufferSize: 64) }
        let received = await withTaskGroup(of: [UserSessionEvent].self) { group in
            for stream in streams {
                group.addTask {
                    var events: [UserSessionEvent] = []
                    for await event in stream { events.append(event) }
                    return events
                }
            }
            _ = try? await controller.open(makePrototype("alice"))
            _ = try? await controller.open(makePrototype("bob"))
            await controller.close()
            _ = try? await controller.restore()
            try? await controller.closeAndClear()
            _ = try? await controller.open(makePrototype("carol"))
            await controller.shutdown()
            var all: [[UserSessionEvent]] = []
            for await events in group { all.append(events) }
            return all
        }

        let expected: [UserSessionEvent.Kind] = [
            .current, .opened, .closed(.replaced), .opened, .closed(.requested), .opened, .closed(.cleared),
            .opened, .closed(.shutdown),
        ]
        #expect(received.count == 1000)
        let reference = try #require(received.first)
        #expect(reference.map(\.kind) == expected)
        #expect(reference.map(\.sequence) == Array(0...8))
        #expect(received.allSatisfy { $0 == reference })
    }

    /// A consumer suspended in `next()` is only handed the event under the hub's lock: it is resumed by `publish`,
    /// which the emitter calls once it holds no lock. A subscriber that was not waiting finds the event buffered.
    @Test func aWaitingConsumerIsResumedOnlyWhenTheEventIsPublishedAfterTheLocks() async throws {
        let hub = EventHub(defaultBufferSize: 8)
        func consumer() -> Task<UserSessionEvent?, Never> {
            let stream = hub.subscribe()
            return Task {
                var iterator = stream.makeAsyncIterator()
                _ = await iterator.next()  // `.current`
                return await iterator.next()
            }
        }
        let (first, second) = (consumer(), consumer())
        let idle = hub.subscribe()
        try await withHangGuard("both consumers wait") {
            while hub.waitingConsumers < 2 { await Task.yield() }
        }
        let observed = try #require(hub.record(.refreshStarted))
        #expect(observed.waiterCount == 2, "both were handed the event, not resumed")
        #expect(hub.waitingConsumers == 0)
        hub.publish(observed)
        #expect(await first.value?.kind == .refreshStarted)
        #expect(await second.value?.kind == .refreshStarted)
        var iterator = idle.makeAsyncIterator()
        #expect(await iterator.next()?.kind == .current)
        #expect(await iterator.next()?.kind == .refreshStarted)
        // No subscriber waiting: nothing to resume.
        #expect(hub.record(.credentialsRefreshed)?.waiterCount == 0)
    }

    @Test func aSubscriberThatNeverReadsStaysWithinItsBufferAndEndsOnTheLatestEvent() async throws {
        let hub = EventHub(defaultBufferSize: 256)
        let stalled = hub.subscribe(bufferSize: 16)
        for index in 1...100_000 {
            let state: UserSession.State = index.isMultiple(of: 2) ? .closed : .opened
            hub.emit(
                index.isMultiple(of: 2) ? .closed(.requested) : .opened,
                session: UserSession(identifier: "u", state: state))
        }
        hub.finish()

        var received: [UserSessionEvent] = []
        for await event in stalled { received.append(event) }
        #expect(received.first?.kind == .current)
        #expect(received.first?.sequence == 0)
        let events = received.dropFirst()
        #expect(events.count == 16)
        #expect(events.last?.sequence == 100_000)
        #expect(events.last?.session.state == .closed)
        #expect(zip(events, events.dropFirst()).allSatisfy { $0.sequence + 1 == $1.sequence })
    }

    @Test func aOneElementBufferStillStartsWithCurrentAndEndsOnTheLatestEvent() async throws {
        let hub = EventHub(defaultBufferSize: 8)
        hub.emit(.opened, session: UserSession(identifier: "u", state: .opened))
        let stalled = hub.subscribe(bufferSize: 1)
        for _ in 0..<3 {
            hub.emit(.closed(.requested), session: UserSession(identifier: "u", state: .closed))
            hub.emit(.opened, session: UserSession(identifier: "u", state: .opened))
        }
        hub.emit(.closed(.shutdown), session: UserSession(identifier: "u", state: .closed))
        hub.finish()

        var received: [UserSessionEvent] = []
        for await event in stalled { received.append(event) }
        #expect(received.map(\.kind) == [.current, .closed(.shutdown)])
        #expect(received.map(\.sequence) == [1, 8])
        #expect(received.first?.session.state == .opened)
        #expect(received.last?.session.state == .closed)
    }

    @Test func aControllerSubscriptionWithBufferSizeOneStartsWithCurrent() async throws {
        let controller = UserSessionController(store: InMemoryTokenStore())
        _ = try await controller.open(makePrototype("alice"))
        let stalled = controller.events(bufferSize: 1)
        await controller.close()
        _ = try await controller.restore()
        await controller.shutdown()

        var received: [UserSessionEvent] = []
        for await event in stalled { received.append(event) }
        #expect(received.map(\.kind) == [.current, .closed(.shutdown)])
        #expect(received.first?.session.identifier == "alice")
        #expect(received.first?.sequence == 1)
    }

    @Test func aStalledControllerSubscriberEndsOnTheFinalState() async throws {
        let controller = UserSessionController(store: InMemoryTokenStore())
        let stalled = controller.events(bufferSize: 4)
        for _ in 0..<500 {
            _ = try await controller.open(makePrototype("alice"))
            await controller.close()
        }
        _ = try await controller.restore()
        await controller.shutdown()

        var received: [UserSessionEvent] = []
        for await event in stalled { received.append(event) }
        #expect(received.first?.kind == .current)
        #expect(received.count == 5)
        #expect(received.last?.kind == .closed(.shutdown))
        #expect(received.last?.sequence == 1002)
        #expect(received.last?.session == controller.session)
    }

    @Test func everyStreamFinishesOnShutdown() async throws {
        let controller = UserSessionController(store: InMemoryTokenStore())
        let probes = (0..<50).map { _ in EventProbe(controller) }
        _ = try await controller.open(makePrototype("alice"))

        await controller.shutdown()

        for probe in probes { await probe.waitUntilFinished() }
        #expect(probes.allSatisfy { $0.kinds == [.opened, .closed(.shutdown)] })
        #expect(controller.hub.subscriberCount == 0)
    }

    @Test func terminatedSubscriptionsAreRemoved() async throws {
        let hub = EventHub(defaultBufferSize: 8)
        do {
            let dropped = hub.subscribe()
            _ = dropped
        }
        #expect(hub.subscriberCount == 0)

        let probe = EventProbe(hub.subscribe())
        await probe.wait { !$0.isEmpty }
        #expect(hub.subscriberCount == 1)
        probe.cancel()
        await probe.waitUntilFinished()
        #expect(hub.subscriberCount == 0)

        hub.emit(.opened, session: UserSession(identifier: "u", state: .opened))
        #expect(hub.sequence == 1)
    }

    @Test func subscriptionsRacingWithTerminationAndFinishNeverLeak() async {
        let hub = EventHub(defaultBufferSize: 4)
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<2000 {
                group.addTask {
                    let stream = hub.subscribe()
                    if index.isMultiple(of: 3) {
                        var iterator = stream.makeAsyncIterator()
                        _ = await iterator.next()
                    }
                }
                if index.isMultiple(of: 100) {
                    group.addTask { hub.emit(.refreshStarted) }
                }
            }
        }
        #expect(hub.subscriberCount == 0)

        let survivors = (0..<100).map { _ in hub.subscribe() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { hub.finish() }
            for _ in 0..<100 { group.addTask { _ = hub.subscribe() } }
        }
        #expect(hub.subscriberCount == 0)
        for stream in survivors {
            var last: UserSessionEvent?
            for await event in stream { last = event }
            #expect(last?.kind == .current)
        }
    }

    @Test func aSubscriptionAfterFinishYieldsCurrentAndFinishes() async {
        let hub = EventHub(defaultBufferSize: 8)
        hub.emit(.opened, session: UserSession(identifier: "u", state: .opened))
        hub.finish()
        hub.emit(.closed(.requested), session: UserSession(identifier: "u", state: .closed))

        var received: [UserSessionEvent] = []
        for await event in hub.subscribe() { received.append(event) }
        #expect(received.map(\.kind) == [.current])
        #expect(received.first?.session.state == .opened)
        #expect(hub.sequence == 1)
    }

    @Test func eventsAndErrorsNeverContainTokens() async throws {
        let log = ServiceLog()
        let services = makeServices(2, log: log) { index, service in
            if index == 1 { service.startFailure = ServiceBoom() }
        }
        let controller = UserSessionController(store: InMemoryTokenStore(), services: services)
        let probe = EventProbe(controller)
        let prototype = makePrototype("alice")
        let error = await #expect(throws: UserSessionError.self) { try await controller.open(prototype) }
        await controller.shutdown()
        await probe.waitUntilFinished()

        let texts = probe.events.map { "\($0)" } + [String(describing: error), String(reflecting: error)]
        for text in texts {
            #expect(!text.contains("access-alice"))
            #expect(!text.contains("refresh-alice"))
        }
    }
}
