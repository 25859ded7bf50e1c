import Foundation

/// Owns the current ``UserSession``: opens, closes and restores it, starts and stops its services, keeps its
/// credentials fresh, and publishes every change as events.
///
/// SKELETON: lifecycle to be implemented (issue 2).
public actor UserSessionController {
    /// The store that keeps credentials between runs.
    public nonisolated let store: any TokenStore
    /// The settings.
    public nonisolated let configuration: Configuration
    let hub: EventHub
    let gate: CredentialsGate
    var services: [any UserSessionService]
    var generation: UInt64 = 0

    /// Creates a controller.
    public init(
        store: any TokenStore,
        refresher: (any TokenRefresher)? = nil,
        services: [any UserSessionService] = [],
        configuration: Configuration = Configuration()
    ) {
        self.store = store
        self.configuration = configuration
        self.services = services
        let hub = EventHub(defaultBufferSize: configuration.eventBufferSize)
        self.hub = hub
        self.gate = CredentialsGate(refresher: refresher, store: store, events: hub, configuration: configuration)
    }

    /// The current session.
    public nonisolated var session: UserSession { hub.session }

    /// A new subscription to the controller's events; its first element describes the current state.
    public nonisolated func events(bufferSize: Int? = nil) -> AsyncStream<UserSessionEvent> {
        hub.subscribe(bufferSize: bufferSize)
    }

    /// Opens a session from `prototype`.
    public func open(_ prototype: UserSessionPrototype) async throws -> UserSession {
        generation += 1
        let session = UserSession(
            identifier: prototype.identifier, state: .opened, userInfo: prototype.userInfo, openedAt: Date())
        gate.activate(
            identifier: prototype.identifier, userInfo: prototype.userInfo, credentials: prototype.credentials,
            generation: generation)
        hub.emit(.opened, session: session)
        return session
    }

    /// Closes the session, keeping its stored credentials.
    public func close() async {
        await gate.deactivate()
        var session = hub.session
        guard session.state == .opened else { return }
        session.state = .closed
        hub.emit(.closed(.requested), session: session)
    }

    /// Closes the session and removes its stored credentials.
    public func closeAndClear() async throws {
        await close()
    }

    /// Restores the session whose identifier was persisted by the last `open`.
    public func restore() async throws -> UserSession? { nil }

    /// Restores the session stored under `identifier`.
    public func restore(identifier: String) async throws -> UserSession? { nil }

    /// Whether `restore()` would open a session.
    public var canRestore: Bool { get async { false } }

    /// Closes the session and finishes every event stream.
    public func shutdown() async {
        await close()
        hub.finish()
    }
}
