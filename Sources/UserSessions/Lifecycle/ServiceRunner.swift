/// How starting a session's services ended.
enum ServiceStartOutcome: Sendable {
    /// Every service started, in order.
    case started([any UserSessionService])
    /// `service` threw `error` or was cancelled while starting; `started` are the services to stop (in start order).
    case failed(service: any UserSessionService, error: any Error, started: [any UserSessionService])
}

/// Starts and stops a session's services. Stateless; the controller owns the ordering.
enum ServiceRunner {
    /// Starts `services` in order, each awaited before the next.
    ///
    /// Cancellation: a service that throws fails the start. A service whose `start` returns normally while the
    /// task is cancelled did start (so it is in `started` and will be stopped) and is named as the one cancelled
    /// while starting; if the task is cancelled before the first service, the first one is named.
    static func start(_ services: [any UserSessionService], session: UserSession) async -> ServiceStartOutcome {
        var started: [any UserSessionService] = []
        started.reserveCapacity(services.count)
        for service in services {
            if started.isEmpty && Task.isCancelled {
                return .failed(service: service, error: CancellationError(), started: started)
            }
            do {
                try await service.start(session: session)
            } catch {
                return .failed(service: service, error: error, started: started)
            }
            started.append(service)
            if Task.isCancelled {
                return .failed(service: service, error: CancellationError(), started: started)
            }
        }
        return .started(started)
    }

    /// Stops `started` (given in start order) in reverse order, each with `timeout`; an overrun is reported on `hub`
    /// with ``UserSessionEvent/Kind/serviceStopOverran(service:)``, its task is cancelled and left behind, and
    /// stopping continues with the next service.
    static func stopInReverse(
        _ started: [any UserSessionService],
        session: UserSession,
        timeout: Duration,
        clock: DeadlineClock = .realTime,
        hub: EventHub
    ) async {
        for service in started.reversed() {
            let stoppedInTime = await stop(service, session: session, timeout: timeout, clock: clock)
            if !stoppedInTime {
                hub.emit(
                    .serviceStopOverran(service: service.name),
                    detail: "stop did not return within \(timeout); it was cancelled and left behind")
            }
        }
    }

    /// Runs `service.stop(session:)` in its own task and waits for it at most `timeout`. Returns `false` on overrun.
    ///
    /// Neither a `TaskGroup` nor awaiting `Task.value` can abandon a child that ignores cancellation, so the stop runs
    /// in an unstructured task and a one-shot continuation is resumed by whichever finishes first.
    static func stop(
        _ service: any UserSessionService, session: UserSession, timeout: Duration, clock: DeadlineClock = .realTime
    ) async -> Bool {
        let stopping = Task { await service.stop(session: session) }
        guard await Deadline.wait(for: stopping, timeout: timeout, clock: clock) else {
            stopping.cancel()
            return false
        }
        return true
    }
}
