extension UserSessionRegistry {
    /// The controller of the current user, set by ``switchUser(to:)`` or ``restoreCurrentUser()``.
    public var currentController: UserSessionController? {
        state.withLock { state in state.currentIdentifier.flatMap { state.entries[ExactIdentifier($0)]?.controller } }
    }

    /// Makes `prototype`'s user the current one: the previous current user's session is closed first (its services
    /// stop first), then the new session opens and its identifier is persisted for ``restoreCurrentUser()``.
    ///
    /// Switches take effect in call order, each after the one before it has finished: switching to bob and then
    /// to carol leaves carol current and persisted and bob closed, even if bob's services were still starting when
    /// the second call was made. Switching never leaves two switched-to users open. The close and the open take
    /// their turns in the two users' lanes when the switch runs, and the new user's lane is held until its
    /// identifier is persisted.
    ///
    /// - Throws: What ``open(_:)`` throws (the previous user stays closed), or the store's error when persisting
    ///   the identifier fails.
    @discardableResult
    public func switchUser(to prototype: UserSessionPrototype) async throws -> UserSessionController {
        if let problem = UserSessionController.identifierProblem(prototype.identifier) {
            throw UserSessionError(.invalidPrototype, "the prototype's identifier \(problem)")
        }
        let key = ExactIdentifier(prototype.identifier)
        return try await withTurn(.switching) {
            let previous = state.withLock { $0.currentIdentifier }
            if let previous, !ExactIdentifier.areEqual(previous, prototype.identifier) {
                await close(identifier: previous)
            }
            let controller = try await withTurn(.user(key)) {
                let controller = try await openInTurn(prototype, key: key)
                state.withLock { $0.currentIdentifier = prototype.identifier }
                try await store.saveCurrentIdentifier(prototype.identifier)
                return controller
            }
            await enforceMaximumOpenSessions(sparing: key)
            return controller
        }
    }

    /// Restores the user persisted by the last ``switchUser(to:)`` and makes it current.
    ///
    /// Takes its turn among the switches, like ``switchUser(to:)``.
    ///
    /// - Returns: The controller, or `nil` when no user is persisted or nothing usable is stored for it (see
    ///   ``restore(identifier:)``).
    /// - Throws: What ``restore(identifier:)`` throws; the store's error when reading the identifier fails.
    public func restoreCurrentUser() async throws -> UserSessionController? {
        try await withTurn(.switching) {
            guard let identifier = try await store.loadCurrentIdentifier() else { return nil }
            guard let controller = try await restore(identifier: identifier) else { return nil }
            state.withLock { $0.currentIdentifier = identifier }
            return controller
        }
    }
}
