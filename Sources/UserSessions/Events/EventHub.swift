import Synchronization

/// Fans events out to every subscriber, each through its own bounded buffer (an ``EventSubscription``) read as an
/// `AsyncStream`.
///
/// Ordering: an event gets its sequence number and is delivered to every subscriber while the lock is held, so all
/// subscribers see one global order, and a new subscription's ``UserSessionEvent/Kind/current`` element is taken in
/// the same critical section, ordered against emits in the same way. Delivering only stores the element, or hands
/// it to the consumer suspended in `next()`: that consumer is resumed after every lock is released
/// (``publish(_:)``), and since the element was bound to it under the lock, resuming it later changes no order.
/// Nothing is resumed, and no consumer or observer code runs, under the lock.
///
/// Buffering: each subscription holds its `.current` element apart from at most `n` newest events. A subscriber
/// that stops reading keeps only its `n` newest events, never blocks the emitter or other subscribers, its first
/// element is always `.current` (even with `n == 1`) and its last element is always the latest event.
///
/// Termination: cancelling the iterating task, or dropping the stream and its iterators, removes the subscription.
/// ``finish()`` ends every subscription after its buffered events.
final class EventHub: Sendable {
    private struct State {
        var session = UserSession()
        /// Declared right after `session`, whose last word it shares: every hub is one allocation size smaller.
        var finished = false
        var sequence: UInt64 = 0
        var subscriptions: [Int: EventSubscription] = [:]
        /// The session generation that emitted events belong to (see ``setGeneration(_:)``).
        var generation: UInt64 = 0

        var currentEvent: UserSessionEvent { UserSessionEvent(kind: .current, session: session, sequence: sequence) }
    }

    private let state = Locked(State())
    /// What every hub of one configuration shares (a registry's controllers: one object for all of them).
    let options: Options

    /// The buffer size and observers of a configuration, made once for every hub it makes.
    final class Options: Sendable {
        let defaultBufferSize: Int
        /// Called with every emitted event, after the lock is released.
        let observers: [any UserSessionObserver]

        init(defaultBufferSize: Int, observers: [any UserSessionObserver] = []) {
            self.defaultBufferSize = defaultBufferSize
            self.observers = observers
        }
    }

    /// Subscription ids, unique in the process (a hub keeps no counter of its own).
    private static let subscriptionIDs = Atomic<Int>(0)

    init(options: Options) {
        self.options = options
    }

    /// A hub with options of its own.
    convenience init(defaultBufferSize: Int, observers: [any UserSessionObserver] = []) {
        self.init(options: Options(defaultBufferSize: defaultBufferSize, observers: observers))
    }

    var defaultBufferSize: Int { options.defaultBufferSize }
    /// Called with every emitted event, after the lock is released.
    var observers: [any UserSessionObserver] { options.observers }

    /// Marks the events emitted from now on as belonging to session `generation`, for observers.
    func setGeneration(_ generation: UInt64) {
        state.withLock { $0.generation = generation }
    }

    /// The session as of the latest event.
    var session: UserSession { state.withLock { $0.session } }

    /// The sequence number of the latest event (0 before the first).
    var sequence: UInt64 { state.withLock { $0.sequence } }

    /// How many subscriptions are registered (terminated ones are removed).
    var subscriberCount: Int { state.withLock { $0.subscriptions.count } }

    /// A new subscription whose first element is ``UserSessionEvent/Kind/current``.
    ///
    /// After ``finish()`` the subscription yields its `.current` element and finishes at once.
    func subscribe(bufferSize: Int? = nil) -> AsyncStream<UserSessionEvent> {
        let capacity = max(1, bufferSize ?? defaultBufferSize)
        let newID = Self.subscriptionIDs.wrappingAdd(1, ordering: .relaxed).newValue
        let (subscription, id) = state.withLock { state -> (EventSubscription, Int?) in
            let subscription = EventSubscription(current: state.currentEvent, capacity: capacity)
            guard !state.finished else { return (subscription, nil) }
            state.subscriptions[newID] = subscription
            return (subscription, newID)
        }
        // After a finish, the subscription yields its `.current` element and ends.
        if id == nil { subscription.finish() }
        let lease = Lease(hub: self, id: id, subscription: subscription)
        // The closures hold the lease: once the stream and its iterators are gone, so is the lease, and its
        // `deinit` removes the subscription.
        return AsyncStream(unfolding: { await lease.subscription.next() }, onCancel: { lease.end() })
    }

    /// Emits `kind`; `session`, when given, becomes the current session. Does nothing after ``finish()``.
    ///
    /// Not inlined: the async frames of the lifecycle calls that emit need not hold an event's temporaries.
    @inline(never)
    func emit(_ kind: UserSessionEvent.Kind, session: UserSession? = nil, detail: String? = nil) {
        publish(record(kind, session: session, detail: detail))
    }

    /// An event recorded under the locks, and what it still owes once every lock is released: the consumers that
    /// were suspended in `next()` and got it, to resume, and the observers, to show it to (``publish(_:)``).
    struct Observed {
        let event: UserSessionEvent
        let context: UserSessionEventContext
        /// The first consumer that got the event, inline: most events have at most one waiting.
        fileprivate var firstWaiter: EventSubscription.Waiter?
        /// The others, in an array made only for a second one.
        fileprivate var moreWaiters: [EventSubscription.Waiter] = []

        /// How many waiting consumers got the event, to be resumed by ``publish(_:)``.
        var waiterCount: Int { (firstWaiter == nil ? 0 : 1) + moreWaiters.count }

        fileprivate mutating func add(_ waiter: EventSubscription.Waiter, among subscribers: Int) {
            guard firstWaiter != nil else {
                firstWaiter = waiter
                return
            }
            if moreWaiters.isEmpty { moreWaiters.reserveCapacity(subscribers - 1) }
            moreWaiters.append(waiter)
        }
    }

    /// Delivers `kind` to the subscribers and returns what it still owes; the caller calls ``publish(_:)`` after
    /// releasing every lock it holds.
    func record(_ kind: UserSessionEvent.Kind, session: UserSession? = nil, detail: String? = nil) -> Observed? {
        state.withLock { state -> Observed? in
            guard !state.finished else { return nil }
            let context = UserSessionEventContext(generation: state.generation, previousState: state.session.state)
            if let session { state.session = session }
            state.sequence += 1
            let event = UserSessionEvent(kind: kind, session: state.session, sequence: state.sequence, detail: detail)
            // Under the lock, so every subscriber gets the same order; a consumer waiting for it is only taken here.
            var observed = Observed(event: event, context: context)
            let count = state.subscriptions.count
            for subscription in state.subscriptions.values {
                if let waiter = subscription.deliver(event) { observed.add(waiter, among: count) }
            }
            return observed
        }
    }

    /// How many consumers are suspended in `next()` now (a probe for tests).
    var waitingConsumers: Int {
        state.withLock { state in state.subscriptions.values.reduce(0) { $0 + ($1.isWaiting ? 1 : 0) } }
    }

    /// Resumes the consumers that got `observed`'s event, then shows it to the observers (user code). Call this
    /// with no lock held.
    func publish(_ observed: Observed?) {
        guard let observed else { return }
        if let waiter = observed.firstWaiter {
            waiter.resume(returning: observed.event)
            for waiter in observed.moreWaiters { waiter.resume(returning: observed.event) }
        }
        guard !observers.isEmpty else { return }
        observers.notify { $0.observe(observed.event, context: observed.context) }
    }

    /// Finishes every subscription; later subscriptions yield `.current` and finish at once. Idempotent.
    func finish() {
        let subscriptions = state.withLock { state -> Dictionary<Int, EventSubscription>.Values in
            state.finished = true
            defer { state.subscriptions.removeAll() }
            return state.subscriptions.values
        }
        for subscription in subscriptions { subscription.finish() }
    }

    fileprivate func remove(_ id: Int) {
        // The removed subscription is released after the lock is dropped (it is returned, then discarded).
        let removed = state.withLock { $0.subscriptions.removeValue(forKey: id) }
        _ = removed
    }

    /// Ties a subscription to the lifetime of its stream.
    private final class Lease: Sendable {
        weak let hub: EventHub?
        let id: Int?
        let subscription: EventSubscription

        init(hub: EventHub, id: Int?, subscription: EventSubscription) {
            self.hub = hub
            self.id = id
            self.subscription = subscription
        }

        /// Ends the subscription: drops what it buffered, ends a pending `next()`, and unregisters it.
        func end() {
            subscription.cancel()
            if let id { hub?.remove(id) }
        }

        deinit { end() }
    }
}

/// One subscriber's buffer: the `.current` element, then at most `capacity` newest events.
///
/// A stream is read by one task at a time; a `next()` that finds another one already waiting ends at once.
final class EventSubscription: Sendable {
    private struct State {
        // The fields every delivery touches come first, to share a cache line with the lock.
        /// The consumer suspended in ``next()``; only ever set while there is nothing to read.
        var waiter: Waiter?
        var finished = false
        var events = EventRing()
        var current: UserSessionEvent?

        mutating func take() -> UserSessionEvent?? {
            if let current {
                self.current = nil
                return current
            }
            if let event = events.popFirst() { return event }
            return finished ? .some(nil) : nil
        }
    }

    private let state: Locked<State>
    private let capacity: Int

    init(current: UserSessionEvent, capacity: Int) {
        self.state = Locked(State(current: current))
        self.capacity = capacity
    }

    /// The consumer suspended in ``next()``.
    typealias Waiter = Parked<UserSessionEvent?, Never>

    /// Whether a consumer is suspended in ``next()`` (a probe).
    var isWaiting: Bool { state.withLock { $0.waiter != nil } }

    /// Hands `event` to the waiting consumer, returned for the caller to resume with it once it holds no lock
    /// (``EventHub/publish(_:)``), or buffers it (dropping the oldest buffered event when full).
    func deliver(_ event: UserSessionEvent) -> Waiter? {
        state.withLock { state -> Waiter? in
            guard !state.finished else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.events.append(event, capacity: capacity)
            return nil
        }
    }

    /// The next element, or `nil` once finished and drained.
    ///
    /// Only the suspension is in this async function; what it reads and decides is in the synchronous ``takeNow()``
    /// and ``park(_:)``. An async function keeps its locals in the task's frame for as long as it is suspended, and
    /// every parked consumer pays for them: with the optional elements inline here (152 bytes each then, 104 since
    /// user info shares its fields between copies), a parked subscriber cost about 2.3 KB more.
    func next() async -> UserSessionEvent? {
        if let ready = takeNow() { return ready }
        return await Parked.wait { park($0) }
    }

    /// The element ready now, `.some(nil)` when finished and drained, or `nil` when the consumer must wait.
    @inline(never)
    private func takeNow() -> UserSessionEvent?? {
        state.withLock { $0.take() }
    }

    /// Parks `consumer` as the one waiting in ``next()`` (`nil`), or answers it at once when an element arrived
    /// meanwhile or another task already waits on this stream (that iteration ends rather than lose a waiter).
    @inline(never)
    private func park(_ consumer: Waiter) -> UserSessionEvent?? {
        state.withLock { state -> UserSessionEvent?? in
            if let ready = state.take() { return ready }
            if state.waiter != nil { return .some(nil) }
            state.waiter = consumer
            return nil
        }
    }

    /// Ends the subscription after what it buffered.
    func finish() {
        close(discarding: false)?.resume(returning: nil)
    }

    /// Ends the subscription now, dropping what it buffered.
    func cancel() {
        close(discarding: true)?.resume(returning: nil)
    }

    private func close(discarding: Bool) -> Waiter? {
        state.withLock { state in
            state.finished = true
            if discarding {
                state.current = nil
                state.events = EventRing()
            }
            defer { state.waiter = nil }
            return state.waiter
        }
    }
}

/// A first-in first-out buffer that drops its oldest element when full.
struct EventRing {
    private var storage: [UserSessionEvent] = []
    private var head = 0

    mutating func append(_ event: UserSessionEvent, capacity: Int) {
        if storage.count - head >= capacity { head += 1 }
        // Compact once the consumed prefix outgrows the live part, so storage stays within twice the capacity.
        if head > 0, head >= capacity {
            storage.removeFirst(head)
            head = 0
        }
        storage.append(event)
    }

    mutating func popFirst() -> UserSessionEvent? {
        guard head < storage.count else { return nil }
        let event = storage[head]
        head += 1
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        }
        return event
    }
}
