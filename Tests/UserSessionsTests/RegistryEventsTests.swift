import Foundation
import Testing

@testable import UserSessions

/// Collects a registry event stream in the background; tests wait for a number of elements or the end.
final class RegistryEventLog: Sendable {
    private let received = Locked<[UserSessionRegistry.Event]>([])
    let arrivals = ArrivalCounter()
    let finished = AsyncGate()

    init(_ stream: AsyncStream<UserSessionRegistry.Event>, onEach: @escaping @Sendable () -> Void = {}) {
        Task { [self] in
            for await event in stream {
                received.withLock { $0.append(event) }
                onEach()
                arrivals.arrive()
            }
            finished.open()
        }
    }

    var events: [UserSessionRegistry.Event] { received.withLock { $0 } }

    /// The kinds received for `identifier`, in order.
    func kinds(_ identifier: String) -> [UserSessionEvent.Kind] {
        events.filter { $0.identifier == identifier }.map(\.event.kind)
    }
}

/// Issue 9, registry item 7: `registry.events()`.
struct RegistryEventsTests {
    /// Every controller's events, with identifiers, in per-controller order, each controller starting with
    /// `.current`; the stream finishes at shutdown after the last events. Consumers may call the registry.
    @Test func everyControllersEventsInOrderUntilShutdown() async throws {
        let registry = UserSessionRegistry(store: InMemoryTokenStore())
        let log = RegistryEventLog(registry.events()) { _ = registry.count }
        try await registry.open(makePrototype("alice"))
        try await registry.open(makePrototype("bob"))
        await registry.close(identifier: "alice")
        await log.arrivals.wait(for: 5)
        #expect(log.kinds("alice") == [.current, .opened, .closed(.requested)])
        await registry.shutdown()
        await log.finished.wait()
        #expect(log.kinds("bob") == [.current, .opened, .closed(.shutdown)])
        #expect(log.events.first { $0.identifier == "alice" }?.event.session.state == .undefined)
        #expect(log.kinds("alice").count == 3)

        let late = RegistryEventLog(registry.events())
        await late.finished.wait()
        #expect(late.events.isEmpty)
    }

    /// A subscriber arriving later starts with `.current` for every held controller; so does a second one, from
    /// the same point of each controller's history.
    @Test func subscribersStartWithTheCurrentStateOfEveryController() async throws {
        let registry = UserSessionRegistry(store: InMemoryTokenStore())
        try await registry.open(makePrototype("alice"))
        try await registry.open(makePrototype("bob"))
        let first = RegistryEventLog(registry.events())
        await first.arrivals.wait(for: 2)
        let second = RegistryEventLog(registry.events())
        await second.arrivals.wait(for: 2)
        for log in [first, second] {
            #expect(Set(log.events.map(\.identifier)) == ["alice", "bob"])
            #expect(log.events.allSatisfy { $0.event.kind == .current && $0.event.session.state == .opened })
        }
        await registry.close(identifier: "bob")
        await first.arrivals.wait(for: 3)
        await second.arrivals.wait(for: 3)
        #expect(first.kinds("bob") == [.current, .closed(.requested)])
        #expect(second.kinds("bob") == [.current, .closed(.requested)])
        await registry.shutdown()
    }

    /// The relay keeps no list of the registry's controllers: without subscribers it tracks none; a subscriber
    /// finds the controllers the registry holds when it arrives (never one the registry dropped before), and a
    /// controller the registry takes later is handed over to it.
    @Test func aSubscriberFindsTheControllersHeldWhenItArrivesAndLaterOnes() async throws {
        let registry = UserSessionRegistry(store: InMemoryTokenStore())
        try await registry.open(makePrototype("alice"))
        try await registry.open(makePrototype("bob"))
        await registry.close(identifier: "bob")  // dropped before anybody subscribed
        #expect(registry.existingController(for: "bob") == nil)
        #expect(registry.relay.forwarderCount == 0)

        let log = RegistryEventLog(registry.events())
        await log.arrivals.wait(for: 1)
        #expect(log.kinds("alice") == [.current])
        #expect(log.events.first?.event.session.state == .opened)
        #expect(registry.relay.forwarderCount == 1)
        try await registry.open(makePrototype("carol"))
        await log.arrivals.wait(for: 3)
        #expect(log.kinds("carol") == [.current, .opened])
        #expect(registry.relay.forwarderCount == 2)

        await registry.shutdown()
        await log.finished.wait()
        #expect(log.kinds("bob").isEmpty)
        #expect(log.kinds("alice") == [.current, .closed(.shutdown)])
        #expect(log.kinds("carol") == [.current, .opened, .closed(.shutdown)])
    }

    /// A subscriber that does not read keeps only its newest elements and always ends on the latest event.
    ///
    /// Each controller's events keep their order; events of two controllers are forwarded by two forwarders, so the
    /// test orders them itself (bob's opening has reached a reader before alice is closed). A forwarder yields to
    /// its subscribers one after another, so when the reader holds an event the slow subscriber may still be about
    /// to receive it: the slow one is read until alice's close, and it can have kept at most its one buffered
    /// element plus one in flight per forwarder, never all five.
    @Test func aSlowSubscriberIsBoundedAndEndsOnTheLatestEvent() async throws {
        let registry = UserSessionRegistry(store: InMemoryTokenStore())
        let slow = registry.events(bufferSize: 1)
        let reader = RegistryEventLog(registry.events())
        try await registry.open(makePrototype("alice"))
        try await registry.open(makePrototype("bob"))
        await reader.arrivals.wait(for: 4)
        #expect(reader.kinds("bob") == [.current, .opened])
        await registry.close(identifier: "alice")
        await reader.arrivals.wait(for: 5)
        var iterator = slow.makeAsyncIterator()
        var seen: [UserSessionRegistry.Event] = []
        while let event = await iterator.next() {
            seen.append(event)
            if event.identifier == "alice", event.event.kind == .closed(.requested) { break }
        }
        #expect(seen.last?.identifier == "alice")
        #expect(seen.last?.event.kind == .closed(.requested))
        #expect((1...3).contains(seen.count))
        await registry.shutdown()
        var rest: [UserSessionRegistry.Event] = []
        while let event = await iterator.next() { rest.append(event) }
        #expect(rest.map(\.identifier) == ["bob"])
        #expect(rest.map(\.event.kind) == [.closed(.shutdown)])
    }
}
