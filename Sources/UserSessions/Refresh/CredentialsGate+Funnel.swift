import Foundation

extension RefreshStateMachine {
    /// What the gate must do after an input, once it has released the lock: resume callers, start background
    /// work, hand the persistence slot on, report. Built under the lock, performed by
    /// ``CredentialsGate/run(_:)`` outside it, in the order of its fields.
    struct Actions {
        /// The persistence slot changed hands: resume its new holder.
        var slot = PersistenceSlot.Action.none
        /// The refresh-loop breaker refused a refresh of the session of `generation`: report it (before the caller
        /// gets the error).
        var loopTripped: (generation: UInt64, detail: String)?
        /// One caller decided at once (served, failed, or cancelled), with its result.
        var caller: (continuation: WaiterContinuation, result: Result<Credentials, any Error>)?
        /// Waiters of a refresh that ended, resumed in arrival order with `waitersResult`.
        var waiters: [Waiter] = []
        var waitersResult: Result<Credentials, any Error> = .failure(RefreshStateMachine.notOpenError)
        /// A refresh to start in the background.
        var refresh: RefreshJob?
        /// A retry of a failed write to start in the background.
        var retry: PersistJob?
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
    /// The funnel every input of the machine goes through: `input` runs under the lock and returns a value and the
    /// actions the transition calls for; the actions run after the lock is released, so no continuation is
    /// resumed, no task started and no event emitted while it is held.
    ///
    /// Plain reads (the hot path's deadline check, the identifier a flight needs) read under the lock directly:
    /// they change nothing, so they have nothing to run.
    func modifyStateAndRunActions<Value: Sendable>(
        _ input: (inout RefreshStateMachine) -> (Value, RefreshStateMachine.Actions)
    ) -> Value {
        let (value, actions) = state.withLock { machine in input(&machine) }
        run(actions)
        return value
    }

    /// Performs `actions` (never under the state lock).
    func run(_ actions: RefreshStateMachine.Actions) {
        if case .resume(let continuation) = actions.slot { continuation.resume() }
        if let (generation, detail) = actions.loopTripped {
            emitWhileActive(.refreshLoopTripped, generation: generation, detail: detail)
        }
        if let (continuation, result) = actions.caller {
            switch result {
            case .success(let credentials): continuation.resume(returning: credentials, token: credentials.accessToken)
            case .failure(let error): continuation.resume(throwing: error)
            }
        }
        if !actions.waiters.isEmpty { Self.resume(actions.waiters, with: actions.waitersResult) }
        if let job = actions.refresh { startFlight(job) }
        if let job = actions.retry { startPersistRetry(job) }
        if let identifier = actions.removeAgain { runInBackground { await self.removeAgain(identifier) } }
    }
}
