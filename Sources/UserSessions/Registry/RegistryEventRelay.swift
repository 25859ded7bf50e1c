/// Carries every held controller's events to the subscribers of ``UserSessionRegistry/events(bufferSize:)``.
///
/// Forwarding: while there is at least one subscriber, each attached controller has one forwarder, a task reading
/// one subscription to that controller's events and handing each event on, so a controller's events keep their
/// order. Without subscribers there are no forwarders (a server that never subscribes pays nothing per session);
/// the first subscriber starts them and the last one leaving stops them. A forwarder subscribes to its controller
/// synchronously when it is started, so no event emitted after that is missed.
///
/// Ordering across subscribers: an event is recorded as its controller's latest and yielded to every subscriber in
/// one critical section, and a new subscriber's opening snapshot is taken in one too, so every subscriber sees, per
/// controller, a `.current` element first and then every later event once. `yield` only stores the element, so no
/// consumer code runs under the lock; streams are finished (which runs their termination handlers, which take the
/// lock) only after it is released.
final class RegistryEventRelay: Sendable {
    private struct Attached {
        let identifier: String
        let controller: UserSessionController
    }

    private struct Forwarder {
        let id: UInt64
        let task: Task<Void, Never>
    }

    private enum Slot {
        case pending
        case active(AsyncStream<UserSessionRegistry.Event>.Continuation)
    }

    private struct State {
        var attached: [UInt64: Attached] = [:]
        var forwarders: [UInt64: Forwarder] = [:]
        /// The latest event forwarded per attached controller, for new subscribers' snapshots.
        var latest: [UInt64: UserSessionRegistry.Event] = [:]
        var slots: [Int: Slot] = [:]
        var nextSlotID = 0
        var nextForwarderID: UInt64 = 0
        var finished = false
    }

    private let state = Locked(State())
    private let controllerBufferSize: Int

    init(controllerBufferSize: Int) {
        self.controllerBufferSize = max(1, controllerBufferSize)
    }

    /// Starts relaying the events of `controller`, held under `entryID`.
    func attach(_ controller: UserSessionController, identifier: String, entryID: UInt64) {
        state.withLock { state in
            state.attached[entryID] = Attached(identifier: identifier, controller: controller)
            if !state.slots.isEmpty { startForwarder(entryID, in: &state) }
        }
    }

    /// Stops offering `entryID`'s controller to new subscribers. Its forwarder, if any, still forwards what the
    /// controller emits until its stream finishes (the registry shuts evicted controllers down).
    func detach(_ entryID: UInt64) {
        state.withLock { _ = $0.attached.removeValue(forKey: entryID) }
    }

    /// A new subscription: per controller a `.current` element first, then its events.
    func subscribe(bufferSize: Int) -> AsyncStream<UserSessionRegistry.Event> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: UserSessionRegistry.Event.self, bufferingPolicy: .bufferingNewest(max(1, bufferSize)))
        let id: Int? = state.withLock { state in
            guard !state.finished else { return nil }
            state.nextSlotID += 1
            state.slots[state.nextSlotID] = .pending
            return state.nextSlotID
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        // Installed before the continuation is reachable, so an early termination leaves no slot behind.
        continuation.onTermination = { [weak self] _ in self?.removeSlot(id) }
        let registered = state.withLock { state -> Bool in
            guard case .pending = state.slots[id] else { return false }
            state.slots[id] = .active(continuation)
            for entryID in state.attached.keys where state.forwarders[entryID] == nil {
                startForwarder(entryID, in: &state)
            }
            for event in state.latest.values.sorted(by: {
                $0.identifier.utf8.lexicographicallyPrecedes($1.identifier.utf8)
            }) {
                let snapshot = UserSessionEvent(
                    kind: .current, session: event.event.session, sequence: event.event.sequence)
                continuation.yield(UserSessionRegistry.Event(identifier: event.identifier, event: snapshot))
            }
            return true
        }
        if !registered { continuation.finish() }
        return stream
    }

    /// Hands `event`, which no held controller emitted (the registry's own, such as a failed revocation for a user
    /// without a controller), to every subscriber. It is not kept for the snapshots of later subscribers.
    func publish(_ event: UserSessionRegistry.Event) {
        state.withLock { state in
            guard !state.finished else { return }
            for slot in state.slots.values {
                if case .active(let continuation) = slot { continuation.yield(event) }
            }
        }
    }

    /// Waits until every forwarder has handed on its controller's last event (the registry shut every controller
    /// down first, so their streams finish), then finishes every subscription. Later subscriptions finish at once.
    func finish() async {
        let forwarders = state.withLock { state -> [Task<Void, Never>] in
            state.finished = true
            return state.forwarders.values.map(\.task)
        }
        for forwarder in forwarders { await forwarder.value }
        let continuations = state.withLock { state -> [AsyncStream<UserSessionRegistry.Event>.Continuation] in
            defer { state.slots.removeAll() }
            return state.slots.values.compactMap { slot in
                if case .active(let continuation) = slot { return continuation }
                return nil
            }
        }
        for continuation in continuations { continuation.finish() }
    }

    private func startForwarder(_ entryID: UInt64, in state: inout State) {
        guard let attached = state.attached[entryID] else { return }
        state.nextForwarderID += 1
        let forwarderID = state.nextForwarderID
        // Subscribed here, synchronously, so nothing the controller emits from now on is missed.
        let events = attached.controller.events(bufferSize: controllerBufferSize)
        let identifier = attached.identifier
        let task = Task { [weak self] in
            for await event in events {
                self?.forward(UserSessionRegistry.Event(identifier: identifier, event: event), entryID, forwarderID)
            }
            self?.forwarderEnded(entryID, forwarderID)
        }
        state.forwarders[entryID] = Forwarder(id: forwarderID, task: task)
    }

    private func forward(_ event: UserSessionRegistry.Event, _ entryID: UInt64, _ forwarderID: UInt64) {
        state.withLock { state in
            guard state.forwarders[entryID]?.id == forwarderID else { return }
            state.latest[entryID] = event
            for slot in state.slots.values {
                if case .active(let continuation) = slot { continuation.yield(event) }
            }
        }
    }

    private func forwarderEnded(_ entryID: UInt64, _ forwarderID: UInt64) {
        state.withLock { state in
            guard state.forwarders[entryID]?.id == forwarderID else { return }
            state.forwarders[entryID] = nil
            state.latest[entryID] = nil
        }
    }

    private func removeSlot(_ id: Int) {
        let stopped = state.withLock { state -> [Task<Void, Never>] in
            guard state.slots.removeValue(forKey: id) != nil, state.slots.isEmpty, !state.finished else { return [] }
            // The last subscriber left: stop forwarding until the next one arrives.
            defer {
                state.forwarders.removeAll()
                state.latest.removeAll()
            }
            return state.forwarders.values.map(\.task)
        }
        for task in stopped { task.cancel() }
    }
}
