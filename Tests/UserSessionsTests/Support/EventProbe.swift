@testable import UserSessions

/// Collects every element of an event stream in the background and lets a test wait, without sleeping, until the
/// collected events satisfy a condition or the stream finished.
final class EventProbe: Sendable {
    private struct State {
        var events: [UserSessionEvent] = []
        var finished = false
        var waiters:
            [(condition: @Sendable ([UserSessionEvent], Bool) -> Bool, continuation: CheckedContinuation<Void, Never>)] =
                []
    }
    private let state = Locked(State())
    private let reader = Locked<Task<Void, Never>?>(nil)

    /// Starts reading `stream`.
    init(_ stream: AsyncStream<UserSessionEvent>) {
        let task = Task { [self] in
            for await event in stream { self.record(event) }
            self.markFinished()
        }
        reader.withLock { $0 = task }
    }

    /// Subscribes to `controller` (buffer large enough for tests) and starts reading.
    convenience init(_ controller: UserSessionController, bufferSize: Int = 1_000_000) {
        self.init(controller.events(bufferSize: bufferSize))
    }

    /// Everything received so far, the initial `.current` included.
    var events: [UserSessionEvent] { state.withLock { $0.events } }

    /// The kinds received so far, without the initial `.current`.
    var kinds: [UserSessionEvent.Kind] { events.map(\.kind).filter { $0 != .current } }

    /// Whether the stream finished.
    var isFinished: Bool { state.withLock { $0.finished } }

    /// Suspends until `condition` holds for the events received so far.
    func wait(until condition: @escaping @Sendable ([UserSessionEvent]) -> Bool) async {
        await wait { events, _ in condition(events) }
    }

    /// Suspends until an event of `kind` was received.
    func wait(for kind: UserSessionEvent.Kind) async {
        await wait { events, _ in events.contains { $0.kind == kind } }
    }

    /// Suspends until the stream finished.
    func waitUntilFinished() async {
        await wait { _, finished in finished }
    }

    /// Stops reading (ends the subscription).
    func cancel() {
        reader.withLock { $0 }?.cancel()
    }

    private func wait(_ condition: @escaping @Sendable ([UserSessionEvent], Bool) -> Bool) async {
        await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            // Conditions are pure functions of the collected events, so evaluating them under the lock is safe.
            let ready = state.withLock { state -> Bool in
                if condition(state.events, state.finished) { return true }
                state.waiters.append((condition, continuation))
                return false
            }
            if ready { continuation.resumeVisibly() }
        }
    }

    private func record(_ event: UserSessionEvent) {
        update { $0.events.append(event) }
    }

    private func markFinished() {
        update { $0.finished = true }
    }

    private func update(_ change: (inout State) -> Void) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            change(&state)
            var ready: [CheckedContinuation<Void, Never>] = []
            state.waiters.removeAll { waiter in
                guard waiter.condition(state.events, state.finished) else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
        for continuation in ready { continuation.resumeVisibly() }
    }
}

extension UserSessionEvent.Kind {
    /// Whether this kind changes the session's lifecycle state.
    var isLifecycleTransition: Bool {
        switch self {
        case .opened, .closed, .invalidated: true
        default: false
        }
    }
}
