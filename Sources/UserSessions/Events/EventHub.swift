import Synchronization

/// Fans events out to every subscriber, each through its own bounded `AsyncStream`.
///
/// SKELETON: a minimal working version; to be completed (issue 2).
final class EventHub: Sendable {
    private struct State {
        var session = UserSession()
        var sequence: UInt64 = 0
        var nextID = 0
        var subscribers: [Int: AsyncStream<UserSessionEvent>.Continuation] = [:]
        var finished = false
    }
    private let state = Mutex(State())
    let defaultBufferSize: Int

    init(defaultBufferSize: Int) {
        self.defaultBufferSize = defaultBufferSize
    }

    /// The session as of the latest event.
    var session: UserSession { state.withLock { $0.session } }

    /// A new subscription whose first element is ``UserSessionEvent/Kind/current``.
    func subscribe(bufferSize: Int? = nil) -> AsyncStream<UserSessionEvent> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: UserSessionEvent.self,
            bufferingPolicy: .bufferingNewest(max(1, bufferSize ?? defaultBufferSize))
        )
        let id: Int? = state.withLock { state in
            guard !state.finished else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = continuation
            continuation.yield(UserSessionEvent(kind: .current, session: state.session, sequence: state.sequence))
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Emits `kind`; `session`, when given, becomes the current session.
    func emit(_ kind: UserSessionEvent.Kind, session: UserSession? = nil, detail: String? = nil) {
        state.withLock { state in
            guard !state.finished else { return }
            if let session { state.session = session }
            state.sequence += 1
            let event = UserSessionEvent(kind: kind, session: state.session, sequence: state.sequence, detail: detail)
            for continuation in state.subscribers.values { continuation.yield(event) }
        }
    }

    /// Finishes every subscription; later subscriptions finish at once.
    func finish() {
        let continuations = state.withLock { state in
            state.finished = true
            defer { state.subscribers.removeAll() }
            return Array(state.subscribers.values)
        }
        for continuation in continuations { continuation.finish() }
    }
}
