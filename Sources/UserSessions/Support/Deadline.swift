/// What a deadline waits on: real time in production, a clock that moves only when a test says so in tests.
///
/// Every timeout of the package (stopping a service, flushing the last write, an HTTP exchange, a transport's own
/// timer) waits through one of these, so a timeout test can advance a manual clock instead of sleeping.
package struct DeadlineClock: Sendable {
    /// Suspends for the given duration; throws `CancellationError` promptly when the calling task is cancelled.
    let sleep: @Sendable (Duration) async throws -> Void

    /// A clock whose waits are `sleep`.
    package init(sleep: @escaping @Sendable (Duration) async throws -> Void) {
        self.sleep = sleep
    }

    /// Real time: `Task.sleep(for:)`.
    package static let realTime = DeadlineClock { duration in try await Task.sleep(for: duration) }
}

/// The package's one deadline helper. Four ways to put a deadline on work, all timed by a ``DeadlineClock``:
/// - ``timer(after:clock:_:)``: call something once the deadline passes, unless cancelled first;
/// - ``wait(for:timeout:clock:)``: wait for a task at most until the deadline and leave it behind after that;
/// - ``run(within:clock:timedOut:_:)``: run an operation and cancel it at the deadline;
/// - ``abandon(after:clock:timedOut:_:)``: run an operation, and at the deadline (or the caller's cancellation)
///   cancel it and return at once, without waiting for it.
package enum Deadline {
    /// Calls `expire` once `timeout` has passed on `clock`, unless the returned task is cancelled first.
    @discardableResult
    package static func timer(
        after timeout: Duration, clock: DeadlineClock = .realTime, _ expire: @escaping @Sendable () -> Void
    ) -> Task<Void, Never> {
        Task {
            // A cancelled sleep means the work finished in time and cancelled this timer.
            guard (try? await clock.sleep(timeout)) != nil else { return }
            expire()
        }
    }

    /// Awaits `task` for at most `timeout`.
    ///
    /// Returns `true` when the task finished in time, `false` when the deadline passed first. The task is neither
    /// cancelled nor awaited further: the caller decides what to do with a task that overran (cancel it, leave it
    /// behind). The caller's own cancellation does not shorten the wait, because the paths that use this (stopping
    /// services, the last write of credentials) must run to the end even when the caller was cancelled.
    package static func wait<Success, Failure>(
        for task: Task<Success, Failure>, timeout: Duration, clock: DeadlineClock = .realTime
    ) async -> Bool {
        let race = DeadlineRace<Bool>()
        return await Parked.wait { (caller: Parked<Bool, Never>) -> Bool? in
            race.start(caller)
            Task {
                _ = await task.result
                race.finish(true)
            }
            race.attach([timer(after: timeout, clock: clock) { race.finish(false) }])
            return nil
        }
    }

    /// Runs `operation`, cancelling it once `timeout` has passed on `clock`.
    ///
    /// The operation runs in a task of its own, cancelled too when the calling task is cancelled. After the
    /// deadline this waits for the operation to return from its cancellation, so nothing it does outlives the call.
    ///
    /// - Throws: what `operation` throws, or `timedOut()` when the deadline came first.
    package static func run<Value: Sendable>(
        within timeout: Duration,
        clock: DeadlineClock = .realTime,
        timedOut: @Sendable () -> any Error,
        _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let task = Task { try await operation() }
        let inTime = await withTaskCancellationHandler {
            await wait(for: task, timeout: timeout, clock: clock)
        } onCancel: {
            task.cancel()
        }
        guard inTime else {
            task.cancel()
            _ = await task.result
            throw timedOut()
        }
        return try await task.value
    }

    /// Runs `operation` in a task of its own and returns what it returns, unless `timeout` passes on `clock` first
    /// (then this throws `timedOut()`) or the calling task is cancelled (then `CancellationError`). In both cases
    /// the operation is cancelled and this returns at once, without waiting for it: for operations that may not
    /// end promptly on cancellation (a connection pool waiting for a server that is down), which then finish on
    /// their own time with nobody waiting for them.
    package static func abandon<Value: Sendable>(
        after timeout: Duration,
        clock: DeadlineClock = .realTime,
        timedOut: @escaping @Sendable () -> any Error,
        _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let race = DeadlineRace<Result<Value, any Error>>()
        let result = await withTaskCancellationHandler {
            await Parked.wait { (caller: Parked<Result<Value, any Error>, Never>) -> Result<Value, any Error>? in
                race.start(caller)
                let work = Task {
                    do {
                        race.finish(.success(try await operation()))
                    } catch {
                        race.finish(.failure(error))
                    }
                }
                race.attach([work, timer(after: timeout, clock: clock) { race.finish(.failure(timedOut())) }])
                return nil
            }
        } onCancel: {
            race.finish(.failure(CancellationError()))
        }
        return try result.get()
    }
}

/// The one-shot race between work, its deadline and (for ``Deadline/abandon(after:clock:timedOut:_:)``) the caller's
/// cancellation: whichever finishes first resumes the parked caller with its outcome and cancels the attached tasks.
/// It may finish before the caller or the tasks arrive; they are then resumed or cancelled on arrival.
private final class DeadlineRace<Outcome: Sendable>: Sendable {
    private struct State {
        var caller: Parked<Outcome, Never>?
        var tasks: [Task<Void, Never>] = []
        var outcome: Outcome?
    }
    private let state = Locked(State())

    func start(_ caller: Parked<Outcome, Never>) {
        let early = state.withLock { state -> Outcome? in
            if let outcome = state.outcome { return outcome }
            state.caller = caller
            return nil
        }
        if let early { caller.resume(returning: early) }
    }

    /// Keeps `tasks` so that the first outcome cancels them (a timer would otherwise sleep on).
    func attach(_ tasks: [Task<Void, Never>]) {
        let cancelNow = state.withLock { state -> Bool in
            if state.outcome != nil { return true }
            state.tasks = tasks
            return false
        }
        if cancelNow { for task in tasks { task.cancel() } }
    }

    func finish(_ outcome: Outcome) {
        let (caller, tasks) = state.withLock { state -> (Parked<Outcome, Never>?, [Task<Void, Never>]) in
            guard state.outcome == nil else { return (nil, []) }
            state.outcome = outcome
            defer {
                state.caller = nil
                state.tasks = []
            }
            return (state.caller, state.tasks)
        }
        for task in tasks { task.cancel() }
        caller?.resume(returning: outcome)
    }
}
