/// Something that runs while a session is open: a sync engine, a push-notification registration, a cache.
///
/// Services start in registration order when a session opens, each awaited before the next, and stop in reverse
/// order when it closes, becomes invalid, or fails to open.
///
/// - Important: ``stop(session:)`` runs even when the task that closed the session was cancelled. It has a
///   deadline (``UserSessionController/Configuration/serviceStopTimeout``); a service that overruns it is reported
///   with ``UserSessionEvent/Kind/serviceStopOverran(service:)`` and left behind.
public protocol UserSessionService: Sendable {
    /// A name for events and errors. Defaults to the type's name.
    var name: String { get }
    /// Starts the service for `session`. Throwing (or being cancelled) makes the open fail and roll back.
    func start(session: UserSession) async throws
    /// Stops the service. Called once for every successful ``start(session:)``.
    func stop(session: UserSession) async
}

extension UserSessionService {
    public var name: String { String(describing: type(of: self)) }
}
