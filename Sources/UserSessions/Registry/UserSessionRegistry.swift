import Synchronization

/// One ``UserSessionController`` per user, for server code acting for many users at once, and the "current user"
/// switch for apps acting for one.
///
/// Controllers are created on demand and share the registry's store, refresher, services factory and
/// configuration. Looking a controller up never suspends. Closed controllers are evicted, so memory follows the
/// number of open sessions, not the number of users ever seen. An evicted controller is shut down, so every event
/// stream of it finishes.
///
/// - Important: Controllers made by a registry do not persist the "current identifier" on `open`; only
///   ``switchUser(to:)`` does, so that many users opening sessions on a server never fight over it.
/// - Important: Identifiers are compared by their UTF-8 bytes, never normalized, as every ``TokenStore`` compares
///   them: `"caf\u{E9}"` (NFC) and `"cafe\u{301}"` (NFD) are equal Swift strings but two users, with two
///   controllers and two stored sessions. Normalize identifiers before they reach the registry if your identity
///   provider can spell one user both ways.
public final class UserSessionRegistry: Sendable {
    private struct State {
        var controllers: [ExactIdentifier: UserSessionController] = [:]
        var currentIdentifier: String?
        var isShutDown = false
    }

    /// The store every controller shares.
    public let store: any TokenStore
    /// The refresher every controller shares.
    public let refresher: (any TokenRefresher)?
    /// The configuration every controller shares.
    public let configuration: UserSessionController.Configuration
    private let makeServices: @Sendable (String) -> [any UserSessionService]
    private let state = Mutex(State())

    /// Creates a registry.
    ///
    /// - Parameters:
    ///   - store: Where every user's credentials live.
    ///   - refresher: How every user's credentials are refreshed.
    ///   - configuration: The settings of every controller.
    ///   - services: Makes the services attached to a user's session, given its identifier.
    public init(
        store: any TokenStore,
        refresher: (any TokenRefresher)? = nil,
        configuration: UserSessionController.Configuration = UserSessionController.Configuration(),
        services: @escaping @Sendable (String) -> [any UserSessionService] = { _ in [] }
    ) {
        self.store = store
        self.refresher = refresher
        var configuration = configuration
        configuration.persistsCurrentIdentifier = false
        self.configuration = configuration
        self.makeServices = services
    }

    /// The controller for `identifier`, created (with no session open yet) if there is none.
    ///
    /// - Throws: ``UserSessionError/Code/shutdown`` after ``shutdown()``.
    public func controller(for identifier: String) throws -> UserSessionController {
        try state.withLock { state in
            guard !state.isShutDown else { throw UserSessionError(.shutdown, "the registry was shut down") }
            let key = ExactIdentifier(identifier)
            if let controller = state.controllers[key] { return controller }
            let controller = UserSessionController(
                store: store, refresher: refresher, services: makeServices(identifier), configuration: configuration)
            state.controllers[key] = controller
            return controller
        }
    }

    /// The controller for `identifier` if the registry holds one.
    public func existingController(for identifier: String) -> UserSessionController? {
        state.withLock { $0.controllers[ExactIdentifier(identifier)] }
    }

    /// The identifiers of the controllers the registry holds now.
    public var identifiers: [String] { state.withLock { $0.controllers.keys.map(\.value).sorted() } }

    /// How many controllers the registry holds now.
    public var count: Int { state.withLock { $0.controllers.count } }

    /// Opens a session for `prototype` in its user's controller and returns that controller.
    ///
    /// If the user already has an open session it is replaced, as ``UserSessionController/open(_:)`` does.
    /// - Throws: What `open` throws; on failure the controller is evicted unless its session is open.
    @discardableResult
    public func open(_ prototype: UserSessionPrototype) async throws -> UserSessionController {
        let controller = try controller(for: prototype.identifier)
        do {
            _ = try await controller.open(prototype)
            return controller
        } catch {
            await evict(prototype.identifier, ifNotOpened: controller)
            throw error
        }
    }

    /// Restores the session stored under `identifier` into its controller.
    ///
    /// - Returns: The controller, or `nil` when nothing usable is stored (the controller is then evicted).
    /// - Throws: What ``UserSessionController/restore(identifier:)`` throws.
    public func restore(identifier: String) async throws -> UserSessionController? {
        let controller = try controller(for: identifier)
        do {
            if try await controller.restore(identifier: identifier) != nil { return controller }
            await evict(identifier, ifNotOpened: controller)
            return nil
        } catch {
            await evict(identifier, ifNotOpened: controller)
            throw error
        }
    }

    /// Closes `identifier`'s session, keeping its stored credentials, and evicts its controller.
    public func close(identifier: String) async {
        guard let controller = existingController(for: identifier) else { return }
        await controller.close()
        await evict(identifier, ifNotOpened: controller)
    }

    /// Closes `identifier`'s session, removes its stored credentials and data, and evicts its controller.
    ///
    /// Works for users without a controller too: their stored credentials and data directories are removed.
    public func closeAndClear(identifier: String) async throws {
        if let controller = existingController(for: identifier) {
            do {
                try await controller.closeAndClear()
            } catch {
                await evict(identifier, ifNotOpened: controller)
                throw error
            }
            await evict(identifier, ifNotOpened: controller)
        } else {
            try await store.remove(identifier: identifier)
            try configuration.dataDirectories?.remove(for: identifier)
        }
        // Checked and reset in one critical section, so a `switchUser` in between is never undone.
        let wasCurrent = state.withLock { state -> Bool in
            guard let current = state.currentIdentifier, ExactIdentifier.areEqual(current, identifier) else {
                return false
            }
            state.currentIdentifier = nil
            return true
        }
        if wasCurrent { try await store.saveCurrentIdentifier(nil) }
    }

    /// Drops every controller whose session is not open (closed, invalid, or never opened), and shuts it down.
    ///
    /// - Returns: How many controllers were dropped.
    @discardableResult
    public func evictIdle() async -> Int {
        let idle = state.withLock { state in
            let idle = state.controllers.filter { !$0.value.session.isOpened }
            for identifier in idle.keys { state.controllers.removeValue(forKey: identifier) }
            return Array(idle.values)
        }
        await Self.shutDown(idle)
        return idle.count
    }

    /// The identifiers that have stored credentials, whether or not their sessions are open.
    public func storedIdentifiers() async throws -> [String] {
        try await store.storedIdentifiers()
    }

    // MARK: Current user (apps acting for one user)

    /// The controller of the current user, set by ``switchUser(to:)`` or ``restoreCurrentUser()``.
    public var currentController: UserSessionController? {
        state.withLock { state in state.currentIdentifier.flatMap { state.controllers[ExactIdentifier($0)] } }
    }

    /// Makes `prototype`'s user the current one: the previous current user's session is closed first (its services
    /// stop first), then the new session opens and its identifier is persisted for ``restoreCurrentUser()``.
    @discardableResult
    public func switchUser(to prototype: UserSessionPrototype) async throws -> UserSessionController {
        let previous = state.withLock { $0.currentIdentifier }
        if let previous, !ExactIdentifier.areEqual(previous, prototype.identifier) {
            await close(identifier: previous)
        }
        let controller = try await open(prototype)
        state.withLock { $0.currentIdentifier = prototype.identifier }
        try await store.saveCurrentIdentifier(prototype.identifier)
        return controller
    }

    /// Restores the user persisted by the last ``switchUser(to:)``.
    ///
    /// - Returns: The controller, or `nil` when no usable session is stored.
    public func restoreCurrentUser() async throws -> UserSessionController? {
        guard let identifier = try await store.loadCurrentIdentifier() else { return nil }
        guard let controller = try await restore(identifier: identifier) else { return nil }
        state.withLock { $0.currentIdentifier = identifier }
        return controller
    }

    /// Shuts every controller down (closing their sessions and finishing their event streams) and refuses new ones.
    public func shutdown() async {
        let controllers = state.withLock { state in
            state.isShutDown = true
            defer { state.controllers.removeAll() }
            return Array(state.controllers.values)
        }
        await Self.shutDown(controllers)
    }

    private static func shutDown(_ controllers: [UserSessionController]) async {
        await withTaskGroup(of: Void.self) { group in
            for controller in controllers { group.addTask { await controller.shutdown() } }
        }
    }

    /// Drops `controller` if it is still the one held for `identifier` and its session is not open, then shuts it
    /// down so that its subscribers' streams finish (nobody can reach it through the registry any more).
    private func evict(_ identifier: String, ifNotOpened controller: UserSessionController) async {
        let evicted = state.withLock { state -> Bool in
            let key = ExactIdentifier(identifier)
            guard state.controllers[key] === controller, !controller.session.isOpened else { return false }
            state.controllers.removeValue(forKey: key)
            return true
        }
        if evicted { await controller.shutdown() }
    }
}
