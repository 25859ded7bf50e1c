#if PostgreSQL
import Foundation
import PostgresNIO
import UserSessions

extension PostgresTokenStore {
    /// The changes every instance makes to this namespace, this one included, until the consumer stops iterating.
    ///
    /// Every save and removal sends `pg_notify` on the channel `user_sessions.<namespace>` in the same statement, so
    /// a notification is sent exactly when the write commits. The payload holds the identifier (base64 of its
    /// UTF-8 bytes) and the revision, never a credential; an identifier too long for PostgreSQL's 8000-byte payload
    /// is announced as ``UserSessions/TokenStoreChange/resynchronize``.
    ///
    /// One listening connection per store instance serves every subscriber; it is opened by the first subscription
    /// and closed when the last one ends. A subscriber gets ``UserSessions/TokenStoreChange/resynchronize``
    /// - once the listener is ready, when it subscribed before (what was written in between was not heard);
    /// - every time the listening connection was lost and is back (it reconnects with a backoff of 50 ms doubling
    ///   up to 2 s), since notifications sent while it was away are gone;
    /// - when it fell more than 256 changes behind: the changes that did not fit are dropped, and the first change
    ///   that fits again comes after a `.resynchronize` (a subscriber that never gets another change is not told).
    /// Use ``listening()`` to wait until the listener is ready.
    public func changes() -> AsyncStream<TokenStoreChange> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: TokenStoreChange.self, bufferingPolicy: .bufferingOldest(ChangeHub.bufferLimit))
        let client = self.client
        let channel = self.channel
        let logger = self.logger
        let hub = self.hub
        let id = hub.subscribe(continuation) { generation in
            Task {
                await ChangeHub.listen(
                    hub: hub, generation: generation, client: client, channel: channel, logger: logger)
            }
        }
        continuation.onTermination = { _ in hub.unsubscribe(id) }
        return stream
    }

    /// Returns once the listener of ``changes()`` has its `LISTEN` in place, so that a change committed from now on
    /// reaches every current subscriber.
    ///
    /// - Throws: ``UserSessions/UserSessionError/Code/wrongState`` when nobody subscribed to ``changes()``;
    ///   ``UserSessions/UserSessionError/Code/storeFailure`` when the listener is not ready within
    ///   ``operationTimeout``.
    public func listening() async throws {
        let hub = self.hub
        try await PostgresOperationDeadline.run(operationTimeout, what: "starting to listen") {
            try await hub.waitUntilListening()
        }
    }
}

/// The notification payloads: `s:<revision>:<base64 identifier>`, `d:<base64 identifier>`, or `r…`
/// (resynchronize: the identifier was too long to send).
enum ChangePayload {
    /// PostgreSQL refuses payloads of 8000 bytes or more; this leaves room for the prefix and the revision.
    static let maximumEncodedIdentifier = 7900

    /// The SQL text parts around the revision of a save's payload.
    static func saved(_ identifier: String) -> (prefix: String, suffix: String) {
        let encoded = Data(identifier.utf8).base64EncodedString()
        guard encoded.utf8.count <= maximumEncodedIdentifier else { return ("r:", "") }
        return ("s:", ":" + encoded)
    }

    static func removed(_ identifier: String) -> String {
        let encoded = Data(identifier.utf8).base64EncodedString()
        guard encoded.utf8.count <= maximumEncodedIdentifier else { return "r" }
        return "d:" + encoded
    }

    /// The change a payload announces; anything unexpected asks for a resynchronization.
    static func parse(_ payload: String) -> TokenStoreChange {
        let parts = payload.split(separator: ":", omittingEmptySubsequences: false)
        switch (parts.first, parts.count) {
        case ("s", 3):
            guard let revision = UInt64(parts[1]), let identifier = decode(parts[2]) else { return .resynchronize }
            return .saved(identifier: identifier, revision: revision)
        case ("d", 2):
            guard let identifier = decode(parts[1]) else { return .resynchronize }
            return .removed(identifier: identifier)
        default:
            return .resynchronize
        }
    }

    private static func decode(_ encoded: Substring) -> String? {
        guard let data = Data(base64Encoded: String(encoded)),
            let identifier = String(validating: Array(data), as: UTF8.self),
            (try? StoredSessionRecord.validate(identifier: identifier)) != nil
        else { return nil }
        return identifier
    }
}

/// The subscribers of one store instance and its one listening connection.
///
/// Nothing runs under the lock but its bookkeeping: changes are yielded to the subscribers' streams, the listener
/// task is started and cancelled, and waiters are resumed after it is released. Only the listener task yields
/// changes, one at a time, so every subscriber gets them in the order they were heard. Each listener has a
/// generation: one that was replaced (the last subscriber left, then a new one came) changes nothing any more.
final class ChangeHub: Sendable {
    static let bufferLimit = 256

    private struct Subscriber {
        var continuation: AsyncStream<TokenStoreChange>.Continuation
        /// Subscribed before the listener was ready, or dropped a change: owes a `.resynchronize`.
        var owesResynchronize: Bool
    }
    private struct State {
        var subscribers: [Int: Subscriber] = [:]
        var nextID = 0
        /// Whether a listener runs (or is being started, before ``listener`` is set).
        var hasListener = false
        var listenerGeneration: UInt64 = 0
        var listener: Task<Void, Never>?
        var isListening = false
        var waiters: [Int: Parked<Void, any Error>] = [:]
    }
    private let state = Locked(State())

    /// Adds a subscriber; starts the listener of a new generation with `start` when none runs.
    func subscribe(
        _ continuation: AsyncStream<TokenStoreChange>.Continuation, start: (UInt64) -> Task<Void, Never>
    ) -> Int {
        let (id, generation) = state.withLock { state -> (Int, UInt64?) in
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = Subscriber(continuation: continuation, owesResynchronize: !state.isListening)
            guard !state.hasListener else { return (id, nil) }
            state.hasListener = true
            state.listenerGeneration += 1
            return (id, state.listenerGeneration)
        }
        guard let generation else { return id }
        let listener = start(generation)
        let kept = state.withLock { state -> Bool in
            guard state.hasListener, state.listenerGeneration == generation else { return false }
            state.listener = listener
            return true
        }
        // The last subscriber left while it was being started.
        if !kept { listener.cancel() }
        return id
    }

    func unsubscribe(_ id: Int) {
        let (listener, waiters) = state.withLock {
            state -> (Task<Void, Never>?, [Parked<Void, any Error>]) in
            state.subscribers[id] = nil
            guard state.subscribers.isEmpty, state.hasListener else { return (nil, []) }
            defer {
                state.hasListener = false
                state.listener = nil
                state.isListening = false
                state.waiters = [:]
            }
            return (state.listener, Array(state.waiters.values))
        }
        listener?.cancel()
        for waiter in waiters {
            waiter.resume(throwing: UserSessionError(.wrongState, "the last subscriber of changes() has ended"))
        }
    }

    func waitUntilListening() async throws {
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await Parked.wait { (caller: Parked<Void, any Error>) in
                state.withLock { state -> Result<Void, any Error>? in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if state.isListening { return .success(()) }
                    if !state.hasListener {
                        return .failure(UserSessionError(.wrongState, "nobody is subscribed to changes()"))
                    }
                    state.waiters[id] = caller
                    return nil
                }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume(throwing: CancellationError())
        }
    }

    /// The listener of `generation` is ready (`true`) or lost its connection (`false`). When ready, every subscriber
    /// that may have missed something gets `.resynchronize`, and the waiters of ``waitUntilListening()`` go on.
    func setListening(_ listening: Bool, reconnected: Bool, generation: UInt64) {
        let (waiters, owing) = state.withLock {
            state -> ([Parked<Void, any Error>], [(id: Int, subscriber: Subscriber)]) in
            guard state.hasListener, state.listenerGeneration == generation else { return ([], []) }
            state.isListening = listening
            guard listening else { return ([], []) }
            let owing = state.subscribers.filter { reconnected || $0.value.owesResynchronize }
            defer { state.waiters = [:] }
            return (Array(state.waiters.values), owing.map { ($0.key, $0.value) })
        }
        var owes: [(id: Int, owes: Bool)] = []
        for (id, subscriber) in owing {
            switch subscriber.continuation.yield(.resynchronize) {
            case .enqueued: owes.append((id, false))
            default: owes.append((id, true))
            }
        }
        record(owes)
        for waiter in waiters { waiter.resume() }
    }

    /// Hands `change`, heard by the listener of `generation`, to every subscriber; one that is full owes a
    /// `.resynchronize` instead.
    func broadcast(_ change: TokenStoreChange, generation: UInt64) {
        let subscribers = state.withLock { state -> [(id: Int, subscriber: Subscriber)] in
            guard state.hasListener, state.listenerGeneration == generation else { return [] }
            return state.subscribers.map { ($0.key, $0.value) }
        }
        var owes: [(id: Int, owes: Bool)] = []
        for (id, subscriber) in subscribers {
            if subscriber.owesResynchronize {
                guard case .enqueued = subscriber.continuation.yield(.resynchronize) else { continue }
                owes.append((id, false))
            }
            if case .dropped = subscriber.continuation.yield(change) { owes.append((id, true)) }
        }
        record(owes)
    }

    /// Records which subscribers owe a `.resynchronize` now (in order: a later entry for a subscriber wins).
    private func record(_ owes: [(id: Int, owes: Bool)]) {
        guard !owes.isEmpty else { return }
        state.withLock { state in
            for (id, owes) in owes { state.subscribers[id]?.owesResynchronize = owes }
        }
    }

    /// The listener: LISTEN on one pooled connection, fan out, reconnect when the connection is lost, until cancelled.
    static func listen(
        hub: ChangeHub, generation: UInt64, client: PostgresClient, channel: String, logger: Logger
    ) async {
        var connectedBefore = false
        var backoff = Duration.milliseconds(50)
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: channel) { notifications in
                        hub.setListening(true, reconnected: connectedBefore, generation: generation)
                        connectedBefore = true
                        backoff = .milliseconds(50)
                        for try await notification in notifications {
                            hub.broadcast(ChangePayload.parse(notification.payload), generation: generation)
                        }
                    }
                }
            } catch {
                // The connection was lost or could not be opened; try again after the backoff.
            }
            hub.setListening(false, reconnected: false, generation: generation)
            if Task.isCancelled { break }
            try? await Task.sleep(for: backoff)
            backoff = min(backoff * 2, .seconds(2))
        }
    }
}
#endif
