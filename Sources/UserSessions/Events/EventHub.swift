import Synchronization

/// Fans events out to every subscriber, each through its own bounded `AsyncStream`.
///
/// Ordering: an event gets its sequence number and is yielded to every subscriber while the lock is held, so all
/// subscribers see one global order, and a new subscription's ``UserSessionEvent/Kind/current`` element is
/// ordered against emits in the same way. `yield` on a continuation only stores the element (or hands it to a
/// suspended consumer, which is scheduled, not run), so no consumer code runs under the lock. `finish()` is
/// different: it runs the stream's `onTermination` handler synchronously, and that handler takes this lock, so
/// streams are only ever finished after the lock is released.
///
/// Buffering: each subscription uses `.bufferingNewest(n)`. A subscriber that stops reading keeps only its `n`
/// newest events, never blocks the emitter or other subscribers, and its last element is always the latest event.
final class EventHub: Sendable {
    private enum Slot {
        /// An id was handed out, the termination handler is being installed, the continuation is not registered.
        case pending
        /// Registered: receives every event.
        case active(AsyncStream<UserSessionEvent>.Continuation)
    }

    private struct State {
        var session = UserSession()
        var sequence: UInt64 = 0
        var nextID = 0
        var slots: [Int: Slot] = [:]
        var finished = false
    }

    private let state = Mutex(State())
    let defaultBufferSize: Int

    init(defaultBufferSize: Int) {
        self.defaultBufferSize = defaultBufferSize
    }

    /// The session as of the latest event.
    var session: UserSession { state.withLock { $0.session } }

    /// The sequence number of the latest event (0 before the first).
    var sequence: UInt64 { state.withLock { $0.sequence } }

    /// How many subscriptions are registered (terminated ones are removed).
    var subscriberCount: Int { state.withLock { $0.slots.count } }

    /// A new subscription whose first element is ``UserSessionEvent/Kind/current``.
    ///
    /// After ``finish()`` the subscription yields its `.current` element and finishes at once.
    func subscribe(bufferSize: Int? = nil) -> AsyncStream<UserSessionEvent> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: UserSessionEvent.self,
            bufferingPolicy: .bufferingNewest(max(1, bufferSize ?? defaultBufferSize))
        )

        // 1. Reserve an id. Nothing can be sent to the continuation yet.
        let id: Int? = state.withLock { state in
            guard !state.finished else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.slots[id] = .pending
            return id
        }
        guard let id else {
            continuation.yield(currentEvent())
            continuation.finish()
            return stream
        }

        // 2. Install the termination handler before the continuation becomes reachable by `emit`/`finish`. It
        //    removes the slot whatever its stage, so a termination that happens between here and step 3 leaves
        //    no slot behind, and step 3 then sees the slot gone and does not register.
        continuation.onTermination = { [weak self] _ in
            self?.removeSlot(id)
        }

        // 3. Register, and yield `.current` in the same critical section so that it is ordered against emits.
        let registered = state.withLock { state -> Bool in
            guard case .pending = state.slots[id] else { return false }
            state.slots[id] = .active(continuation)
            continuation.yield(UserSessionEvent(kind: .current, session: state.session, sequence: state.sequence))
            return true
        }
        if !registered {
            // Terminated early, or `finish()` ran between steps 1 and 3 (it removed the pending slot).
            continuation.yield(currentEvent())
            continuation.finish()
        }
        return stream
    }

    /// Emits `kind`; `session`, when given, becomes the current session. Does nothing after ``finish()``.
    func emit(_ kind: UserSessionEvent.Kind, session: UserSession? = nil, detail: String? = nil) {
        state.withLock { state in
            guard !state.finished else { return }
            if let session { state.session = session }
            state.sequence += 1
            let event = UserSessionEvent(kind: kind, session: state.session, sequence: state.sequence, detail: detail)
            // `yield` never runs consumer code (see the type's documentation), so this stays under the lock to
            // give every subscriber the same order.
            for slot in state.slots.values {
                if case .active(let continuation) = slot { continuation.yield(event) }
            }
        }
    }

    /// Finishes every subscription; later subscriptions yield `.current` and finish at once. Idempotent.
    func finish() {
        let continuations = state.withLock { state -> [AsyncStream<UserSessionEvent>.Continuation] in
            state.finished = true
            var continuations: [AsyncStream<UserSessionEvent>.Continuation] = []
            continuations.reserveCapacity(state.slots.count)
            for slot in state.slots.values {
                if case .active(let continuation) = slot { continuations.append(continuation) }
            }
            state.slots.removeAll()
            return continuations
        }
        // Outside the lock: finishing runs `onTermination`, which takes the lock.
        for continuation in continuations { continuation.finish() }
    }

    private func currentEvent() -> UserSessionEvent {
        state.withLock { UserSessionEvent(kind: .current, session: $0.session, sequence: $0.sequence) }
    }

    private func removeSlot(_ id: Int) {
        // The removed continuation is released after the lock is dropped (it is returned, then discarded).
        let removed = state.withLock { $0.slots.removeValue(forKey: id) }
        _ = removed
    }
}
