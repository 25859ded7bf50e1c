/// Carries every held controller's events to the subscribers of ``UserSessionRegistry/events(bufferSize:)``.
///
/// Forwarding: while there is at least one subscriber, each attached controller has one forwarder, a task reading
/// one subscription to that controller's events and handing each event on, so a controller's events keep their
/// order. Without subscribers there are no forwarders (a server that never subscribes pays nothing per session);
/// the first subscriber starts them and the last one leaving stops them. A forwarder subscribes to its controller
/// synchronously when it is started, so no event emitted after that is missed.
///
/// Ordering across subscribers: an event is recorded as its controller's latest in one critical section, and a new
/// subscriber's opening snapshot is taken in one too; a subscriber whose snapshot is still being handed over keeps the
/// events that arrive meanwhile in its slot, in order, and hands them over after it. So every subscriber sees, per
/// controller, a `.current` element first and then every later event once.
///
/// Nothing runs under the lock but its bookkeeping: elements are yielded to the streams, forwarders subscribe to
/// their controllers and their tasks start, and streams are finished (which runs their termination handlers, which
/// take the lock) only after it is released. A forwarder is reserved under the lock and started after it; one whose
/// reservation was withdrawn meanwhile (the last subscriber left) is cancelled as soon as it is made.
final class RegistryEventRelay: Sendable {
    private struct Attached {
        let identifier: String
        let controller: UserSessionController
    }

    private struct Forwarder {
        let id: UInt64
        /// `nil` between its reservation and its start.
        var task: Task<Void, Never>?
    }

    /// A forwarder reserved under the lock, to start after it.
    private struct Reservation {
        let entryID: UInt64
        let forwarderID: UInt64
        let attached: Attached
    }

    private typealias Continuation = AsyncStream<UserSessionRegistry.Event>.Continuation

    private enum Slot {
        /// Registered; its opening snapshot is being handed over. Events that arrive meanwhile wait here, in order.
        case opening([UserSessionRegistry.Event])
        case active(Continuation)
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

        /// Reserves a forwarder for `entryID`'s controller (started by the caller after the lock is released).
        mutating func reserveForwarder(_ entryID: UInt64) -> Reservation? {
            guard let attached = attached[entryID] else { return nil }
            nextForwarderID += 1
            forwarders[entryID] = Forwarder(id: nextForwarderID, task: nil)
            return Reservation(entryID: entryID, forwarderID: nextForwarderID, attached: attached)
        }

        /// Hands `event` to every subscriber: the active ones are returned (the caller yields to them after the lock
        /// is released), the ones still opening keep it in their slots.
        mutating func deliver(_ event: UserSessionRegistry.Event) -> [Continuation] {
            var active: [Continuation] = []
            var opening: [Int] = []
            for (id, slot) in slots {
                switch slot {
                case .active(let continuation): active.append(continuation)
                case .opening: opening.append(id)
                }
            }
            for id in opening {
                if case .opening(var waiting) = slots[id] {
                    waiting.append(event)
                    slots[id] = .opening(waiting)
                }
            }
            return active
        }
    }

    private let state = Locked(State())
    private let controllerBufferSize: Int

    init(controllerBufferSize: Int) {
        self.controllerBufferSize = max(1, controllerBufferSize)
    }

    /// Starts relaying the events of `controller`, held under `entryID`. Called with no lock held.
    func attach(_ controller: UserSessionController, identifier: String, entryID: UInt64) {
        let reservation = state.withLock { state -> Reservation? in
            state.attached[entryID] = Attached(identifier: identifier, controller: controller)
            return state.slots.isEmpty ? nil : state.reserveForwarder(entryID)
        }
        if let reservation { start(reservation) }
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
            state.slots[state.nextSlotID] = .opening([])
            return state.nextSlotID
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        // Installed before the continuation is reachable, so an early termination leaves no slot behind.
        continuation.onTermination = { [weak self] _ in self?.removeSlot(id) }
        let opening = state.withLock { state -> (snapshot: [UserSessionRegistry.Event], starts: [Reservation])? in
            guard state.slots[id] != nil else { return nil }
            var starts: [Reservation] = []
            for entryID in state.attached.keys where state.forwarders[entryID] == nil {
                if let reservation = state.reserveForwarder(entryID) { starts.append(reservation) }
            }
            let snapshot = state.latest.values.sorted {
                $0.identifier.utf8.lexicographicallyPrecedes($1.identifier.utf8)
            }.map { event in
                UserSessionRegistry.Event(
                    identifier: event.identifier,
                    event: UserSessionEvent(
                        kind: .current, session: event.event.session, sequence: event.event.sequence))
            }
            return (snapshot, starts)
        }
        guard let opening else {
            continuation.finish()
            return stream
        }
        for reservation in opening.starts { start(reservation) }
        for element in opening.snapshot { continuation.yield(element) }
        handOverWhatArrivedMeanwhile(id, continuation)
        return stream
    }

    /// Yields the events that arrived while subscriber `id` was opening, until none is left; then the subscriber is
    /// active. A subscriber whose slot is gone (the relay finished) is finished here.
    private func handOverWhatArrivedMeanwhile(_ id: Int, _ continuation: Continuation) {
        while true {
            let waiting = state.withLock { state -> [UserSessionRegistry.Event]? in
                guard case .opening(let waiting) = state.slots[id] else { return nil }
                state.slots[id] = waiting.isEmpty ? .active(continuation) : .opening([])
                return waiting
            }
            guard let waiting else {
                continuation.finish()
                return
            }
            if waiting.isEmpty { return }
            for event in waiting { continuation.yield(event) }
        }
    }

    /// Hands `event`, which no held controller emitted (the registry's own, such as a failed revocation for a user
    /// without a controller), to every subscriber. It is not kept for the snapshots of later subscribers.
    func publish(_ event: UserSessionRegistry.Event) {
        let active = state.withLock { state -> [Continuation] in
            guard !state.finished else { return [] }
            return state.deliver(event)
        }
        for continuation in active { continuation.yield(event) }
    }

    /// Waits until every forwarder has handed on its controller's last event (the registry shut every controller
    /// down first, so their streams finish), then finishes every subscription. Later subscriptions finish at once.
    func finish() async {
        let forwarders = state.withLock { state -> [Task<Void, Never>] in
            state.finished = true
            return state.forwarders.values.compactMap(\.task)
        }
        for forwarder in forwarders { await forwarder.value }
        let continuations = state.withLock { state -> [Continuation] in
            defer { state.slots.removeAll() }
            return state.slots.values.compactMap { slot in
                if case .active(let continuation) = slot { return continuation }
                return nil
            }
        }
        for continuation in continuations { continuation.finish() }
    }

    /// Subscribes to the reserved forwarder's controller and starts the task that forwards its events; cancels it
    /// when the reservation was withdrawn meanwhile.
    private func start(_ reservation: Reservation) {
        let events = reservation.attached.controller.events(bufferSize: controllerBufferSize)
        let (identifier, entryID, forwarderID) =
            (reservation.attached.identifier, reservation.entryID, reservation.forwarderID)
        let task = Task { [weak self] in
            for await event in events {
                self?.forward(UserSessionRegistry.Event(identifier: identifier, event: event), entryID, forwarderID)
            }
            self?.forwarderEnded(entryID, forwarderID)
        }
        let kept = state.withLock { state -> Bool in
            guard state.forwarders[entryID]?.id == forwarderID else { return false }
            state.forwarders[entryID]?.task = task
            return true
        }
        if !kept { task.cancel() }
    }

    private func forward(_ event: UserSessionRegistry.Event, _ entryID: UInt64, _ forwarderID: UInt64) {
        let active = state.withLock { state -> [Continuation] in
            guard state.forwarders[entryID]?.id == forwarderID else { return [] }
            state.latest[entryID] = event
            return state.deliver(event)
        }
        for continuation in active { continuation.yield(event) }
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
            return state.forwarders.values.compactMap(\.task)
        }
        for task in stopped { task.cancel() }
    }
}
