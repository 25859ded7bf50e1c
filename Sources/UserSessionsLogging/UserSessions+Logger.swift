#if Logging
import Logging
import UserSessions

extension UserSessionController.Configuration {
    /// This configuration, with a ``UserSessionLogObserver`` logging to `logger` added to its observers.
    public func logging(to logger: Logger) -> Self {
        var configuration = self
        configuration.observers.append(UserSessionLogObserver(logger: logger))
        return configuration
    }
}

extension UserSessionController {
    /// Creates a controller that logs every event to `logger` (see ``UserSessionLogObserver``).
    ///
    /// The store is not wrapped: pass `store.logging(to: logger)` to log its calls too.
    public init(
        store: any TokenStore,
        refresher: (any TokenRefresher)? = nil,
        services: [any UserSessionService] = [],
        configuration: Configuration = Configuration(),
        logger: Logger
    ) {
        self.init(
            store: store, refresher: refresher, services: services, configuration: configuration.logging(to: logger))
    }
}

extension UserSessionRegistry {
    /// Creates a registry whose controllers log every event to `logger` (see ``UserSessionLogObserver``).
    ///
    /// The store is not wrapped: pass `store.logging(to: logger)` to log its calls too.
    public convenience init(
        store: any TokenStore,
        refresher: (any TokenRefresher)? = nil,
        configuration: UserSessionController.Configuration = UserSessionController.Configuration(),
        logger: Logger,
        services: @escaping @Sendable (String) -> [any UserSessionService] = { _ in [] }
    ) {
        self.init(
            store: store, refresher: refresher, configuration: configuration.logging(to: logger), services: services)
    }
}
#endif
