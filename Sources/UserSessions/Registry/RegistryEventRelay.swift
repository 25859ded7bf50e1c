/// Carries every held controller's events to the subscribers of ``UserSessionRegistry/events(bufferSize:)``.
///
/// Which controllers: the registry's. The relay keeps no list of its own: a new subscriber reads the registry's held
/// controllers (``subscribe(bufferSize:held:)``), and a controller the registry holds from then on is handed over
/// by ``attach(_:)``. A controller leaving the registry needs no call: its forwarder, if any,
/// ends with its stream (the registry shuts it down), and later subscribers no longer find it.
///
/// Forwarding: while there is at least one subscriber, each held controller has one forwarder, a task reading
/// one subscription to that controller's events and handing each event on, so a controller's events keep their
/// order. Without subscribers there are no forwarders and the relay keeps nothing per controller (a server that
/// never subscribes pays nothing per session); the first subscriber starts them and the last one leaving stops
/// them. A forwarder subscribes to its controller synchronously when it is started, so no event emitted after that
/// is missed.
///
/// Ordering across subscribers: an event is recorded as its controller's latest in one critical section, and a new
/// subscriber's opening snapshot is taken in one too; a subscriber whose snapshot is still being handed over keeps the
/// events that arrive meanwhile in its slot, in order, and hands them over after it. So every subscriber sees, per
/// controller, a `.current` element first and then every later event once.
///
/// Nothing runs under the lock but its bookkeeping and a new subscriber's read of the registry's held controllers
/// (the registry's lock nested in this one): elements are yielded to the streams, forwarders subscribe to their
/// controllers and their tasks start, and streams are finished (which runs their termination handlers, which take
/// the lock) only after it is released. A forwarder is reserved under the lock and started after it; one whose
/// reservation was withdrawn meanwhile (the last subscriber left) is cancelled as soon as it is made.
final class RegistryEventRelay: Sendable {
    /// A controller the registry holds, as the registry hands it over (``attach(_:)``, and the `held` read of
    /// ``subscribe(bufferSize:held:)``).
    struct Held {
        /// The registry's entry: tells this controller apart from a later one for the same identifier.
        let entryID: UInt64
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
        let forwarderID: UInt64
        let held: Held
    }

    private typealias Continuation = AsyncStream<UserSessionRegistry.Event>.Continuation

    private enum Slot {
        /// Registered; its opening snapshot is being handed over. Events that arrive meanwhile wait here, in order.
        case opening([UserSessionRegistry.Event])
        case active(Continuation)
    }

    private struct State {
        var forwarders: [UInt64: Forwarder] = [:]
        /// The latest event of each controller with a forwarder, for new subscribers' snapshots.
        var latest: [UInt64: UserSessionRegistry.Event] = [:]
        var slots: [Int: Slot] = [:]
        var nextSlotID = 0
        var nextForwarderID: UInt64 = 0
        var finished = false

        /// Reserves a forwarder for `held` (started by the caller after the lock is released).
        mutating func reserveForwarder(_ held: Held) -> Reservation {
            nextForwarderID += 1
            forwarders[held.entryID] = Forwarder(id: nextForwarderID, task: nil)
            return Reservation(forwarderID: nextForwarderID, held: held)
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

    /// How many controllers have a forwarder (a probe for tests): none while nobody is subscribed, since the relay
    /// keeps nothing per controller then (each controller's latest event is kept beside its forwarder only).
    var forwarderCount: Int { state.withLock { $0.forwarders.count } }

    /// The registry holds `held` from now on: relays its events if anybody is subscribed (a later first subscriber
    /// finds it among the registry's held controllers instead). Called with no lock held.
    func attach(_ held: Held) {
        let reservation = state.withLock { state -> Reservation? in
            // A subscriber that arrived since the registry took the controller may have started its forwarder.
            guard !state.slots.isEmpty, !state.finished, state.forwarders[held.entryID] == nil else { return nil }
            return state.reserveForwarder(held)
        }
        if let reservation { start(reservation) }
    }

    /// A new subscription: per controller a `.current` element first, then its events.
    ///
    /// - Parameter held: The registry's held controllers with their entry ids, read under the registry's lock.
    ///   Called under this relay's lock (the one nesting of the two: the registry never calls the relay while it
    ///   holds its own lock), so a controller the registry drops after this subscription began is never offered to
    ///   it, and one it takes after is handed over by ``attach(_:)``.
    func subscribe(bufferSize: Int, held: () -> [Held]) -> AsyncStream<UserSessionRegistry.Event> {
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
            for held in held() where state.forwarders[held.entryID] == nil {
                starts.append(state.reserveForwarder(held))
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
        let events = reservation.held.controller.events(bufferSize: controllerBufferSize)
        let (identifier, entryID, forwarderID) =
            (reservation.held.identifier, reservation.held.entryID, reservation.forwarderID)
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
