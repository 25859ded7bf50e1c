import Foundation

extension RefreshStateMachine {
    /// What the gate must do after an input, once it has released the lock: resume callers, start background
    /// work, hand the persistence slot on, emit events. Built under the lock, performed by
    /// ``CredentialsGate/run(_:)`` outside it, in the order of its fields.
    ///
    /// The two calls up to the controller (a terminal failure invalidates the session; a record removed elsewhere
    /// closes it) are asynchronous: an input returns them as its value and the gate awaits them after the actions.
    struct Actions {
        /// An event to emit.
        struct Event {
            let kind: UserSessionEvent.Kind
            var detail: String?
        }

        /// The persistence slot changed hands: resume its new holder.
        var slot = PersistenceSlot.Action.none
        /// The refresh-loop breaker refused a refresh of the session of `generation`: report it (before the caller
        /// gets the error), if that session is still active.
        var loopTripped: (generation: UInt64, detail: String)?
        /// Events of the transition, emitted in this order (before any caller or waiter is resumed).
        var events: [Event] = []
        /// One caller decided at once (served, failed, or cancelled), with its result.
        var caller: (continuation: WaiterContinuation, result: Result<Credentials, any Error>)?
        /// Waiters of a refresh that ended, resumed in arrival order with `waitersResult`.
        var waiters: [Waiter] = []
        var waitersResult: Result<Credentials, any Error> = .failure(RefreshStateMachine.notOpenError)
        /// A refresh to start in the background.
        var refresh: RefreshJob?
        /// A retry of a failed write to start in the background.
        var retry: PersistJob?
        /// A write failed: arm the timer that retries it when its backoff elapses.
        var armRetryTimer = false
        /// A record to remove again: a write left behind by a close landed after the clear.
        var removeAgain: String?

        static var none: Actions { Actions() }

        /// Resume `waiters` with `result`.
        static func resume(_ waiters: [Waiter], with result: Result<Credentials, any Error>) -> Actions {
            Actions(waiters: waiters, waitersResult: result)
        }
    }
}

extension CredentialsGate {
    /// Performs `actions` (never under the state lock).
    func run(_ actions: RefreshStateMachine.Actions) {
        if case .resume(let continuation) = actions.slot { continuation.resumeVisibly() }
        if let (generation, detail) = actions.loopTripped {
            emitWhileActive(.refreshLoopTripped, generation: generation, detail: detail)
        }
        emit(actions.events)
        if let (continuation, result) = actions.caller {
            switch result {
            case .success(let credentials): continuation.resume(returning: credentials, token: credentials.accessToken)
            case .failure(let error): continuation.resume(throwing: error)
            }
        }
        if !actions.waiters.isEmpty { Self.resume(actions.waiters, with: actions.waitersResult) }
        if let job = actions.refresh { startFlight(job) }
        if let job = actions.retry { startPersistRetry(job) }
        if actions.armRetryTimer { armRetryTimer() }
        if let identifier = actions.removeAgain { runInBackground { await self.removeAgain(identifier) } }
    }

    func emit(_ events: [RefreshStateMachine.Actions.Event]) {
        for event in events { self.events.emit(event.kind, session: nil, detail: event.detail) }
    }

    /// Emits `kind` if the session of `generation` is still active, ordered against `deactivate()`.
    func emitWhileActive(_ kind: UserSessionEvent.Kind, generation: UInt64, detail: String?) {
        modifyStateAndRunActions(ordered: true) { machine in
            machine.isActive(generation: generation) ? .init(events: [.init(kind: kind, detail: detail)]) : .none
        }
    }
}
