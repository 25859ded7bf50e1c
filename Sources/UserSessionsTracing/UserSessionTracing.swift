#if Tracing
import Tracing
import UserSessions

/// Spans for what controllers and registries do, with swift-distributed-tracing.
///
/// One value is both the controller's `UserSessionInstrumentation` (it opens a span around every
/// refresh flight, restore and revocation at sign-out, current while the operation runs, so the store and transport
/// calls inside are its children) and a `UserSessionObserver` (a refresh's report, delivered on the
/// flight's task, annotates the refresh span). Install it with `configuration.tracing(_:)`, which sets both.
///
/// | span | kind | attributes |
/// |---|---|---|
/// | `user_sessions.refresh` | internal | `user_sessions.refresh.outcome` (`succeeded`, `failed`, `discarded`), `user_sessions.refresh.waiters`, `user_sessions.refresh.failure_class` and `error.type` when failed |
/// | `user_sessions.restore` | internal | `error.type` when it throws |
/// | `user_sessions.revocation` | internal | `error.type` when it throws |
///
/// A span that ends with an error has status `error` and `error.type` (a `UserSessionError`'s code,
/// or the error's type): errors are never recorded as they are, because their descriptions might hold a secret. No
/// attribute holds a token, a session identifier or anything from the credentials.
public struct UserSessionTracing: UserSessionInstrumentation, UserSessionObserver, Sendable {
    /// Makes the spans.
    public let tracer: any Tracer

    /// Spans made by `tracer`. Default: the one bootstrapped in `InstrumentationSystem`.
    public init(tracer: any Tracer = InstrumentationSystem.tracer) {
        self.tracer = tracer
    }

    public func measure<Result>(
        _ operation: UserSessionOperation,
        isolation: isolated (any Actor)?,
        _ body: () async throws -> Result
    ) async throws -> Result {
        try await SpanScope(tracer: tracer).run(
            operation.name, kind: .internal, bindingRefreshSpan: operation == .refresh, isolation: isolation
        ) { _ in
            try await body()
        }
    }

    public func observe(_ event: UserSessionEvent, context: UserSessionEventContext) {}

    public func observeRefresh(_ report: UserSessionRefreshReport) {
        // Called on the flight's task, inside `measure(.refresh)`, which bound its span.
        guard let span = SpanScope.refreshSpan else { return }
        span.updateAttributes { attributes in
            attributes[SpanAttributeName.refreshOutcome] = report.outcome.rawValue
            attributes[SpanAttributeName.refreshWaiters] = report.waiters
            if let failureClass = report.failureClass {
                attributes[SpanAttributeName.refreshFailureClass] = failureClass.rawValue
                attributes[SpanAttributeName.errorType] = failureClass.rawValue
            }
        }
        if report.outcome == .failed { span.setStatus(SpanStatus(code: .error)) }
    }
}

extension UserSessionController.Configuration {
    /// This configuration, with `tracing` (default: spans of the bootstrapped tracer) as its instrumentation and
    /// among its observers (see ``UserSessionTracing``).
    public func tracing(_ tracing: UserSessionTracing = UserSessionTracing()) -> Self {
        var configuration = self
        configuration.instrumentation = tracing
        configuration.observers.append(tracing)
        return configuration
    }
}
#endif
