extension UserSessionRegistry {
    /// Evicts what the registry need not hold, and returns how many controllers it evicted:
    /// - every controller whose session is not open (closed, invalid, or never opened);
    /// - with ``idleTimeout``, every open session that nobody looked up through the registry and nobody asked a
    ///   token of for that long, judged by ``UserSessionController/Configuration/clock``;
    /// - with ``maximumOpenSessions``, the least recently used open sessions beyond the bound.
    ///
    /// Evicting closes the session (event `.closed(.shutdown)`), keeps its stored credentials, shuts the
    /// controller down and drops it, so the user's next ``session(for:)`` restores. A controller with anything in
    /// progress is left alone: an operation of the registry for its identifier running or waiting, a lifecycle
    /// call of its own (an open or restore made directly on it), a refresh in flight or a write of its
    /// credentials. The registry runs no timer: call this periodically (for example every minute) to apply
    /// ``idleTimeout``.
    @discardableResult
    public func evictIdle() async -> Int {
        let now = now()
        let timeout = idleTimeout?.seconds
        let victims = state.withLock { state in
            state.isShutDown
                ? []
                : state.claimVictims(now: now, unopened: true, idleTimeout: timeout, maximumOpen: maximumOpenSessions)
        }
        return await evict(victims)
    }

    /// Shuts every controller down (closing their sessions and finishing their event streams), then finishes the
    /// streams of ``events(bufferSize:)`` after every controller's last event, and refuses new work: later calls
    /// throw ``UserSessionError/Code/shutdown`` (``close(identifier:)`` does nothing).
    public func shutdown() async {
        let controllers = state.withLock { state in
            state.isShutDown = true
            defer { state.entries.removeAll() }
            return state.entries.values.map(\.controller)
        }
        await withTaskGroup(of: Void.self) { group in
            for controller in controllers { group.addTask { await controller.shutdown() } }
        }
        await relay.finish()
    }

    // MARK: Internals

    /// Closes the least recently used open sessions beyond ``maximumOpenSessions``, never `sparing`'s.
    func enforceMaximumOpenSessions(sparing key: ExactIdentifier) async {
        guard let maximumOpenSessions else { return }
        let victims = state.withLock { state -> [RegistryState.Victim] in
            // Cheap check first: the bound cannot be exceeded by fewer held controllers.
            guard !state.isShutDown, state.entries.count > maximumOpenSessions else { return [] }
            return state.claimVictims(
                now: 0, unopened: false, idleTimeout: nil, maximumOpen: maximumOpenSessions, sparing: key)
        }
        _ = await evict(victims)
    }

    /// Evicts the claimed `victims` concurrently; returns how many were evicted.
    private func evict(_ victims: [RegistryState.Victim]) async -> Int {
        guard !victims.isEmpty else { return 0 }
        return await withTaskGroup(of: Bool.self) { group in
            for victim in victims { group.addTask { await self.evict(victim) } }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
    }

    /// Shuts `victim` down if nothing is in progress in it and drops it; then ends the turn it was claimed with.
    private func evict(_ victim: RegistryState.Victim) async -> Bool {
        defer { leave(victim.ticket) }
        guard await victim.controller.shutdownIfIdle() else { return false }
        _ = state.withLock { $0.remove(victim.key, entryID: victim.entryID) }
        relay.detach(victim.entryID)
        reportEviction(victim.key.value)
        return true
    }

    /// Makes `controller` leave the registry when a terminal refresh failure invalidates its session.
    func leaveWhenInvalidated(_ controller: UserSessionController, key: ExactIdentifier, entryID: UInt64) {
        let invalidate = controller.gate.currentTerminalFailureHandler()
        controller.gate.setTerminalFailureHandler { [weak self] generation in
            await invalidate?(generation)
            await self?.removeIfInvalid(key, entryID: entryID)
        }
    }

    private func removeIfInvalid(_ key: ExactIdentifier, entryID: UInt64) async {
        await withTurn(.user(key)) {
            guard let entry = state.withLock({ $0.entries[key] }), entry.id == entryID,
                entry.controller.session.state == .invalid, await entry.controller.shutdownIfIdle()
            else { return }
            _ = state.withLock { $0.remove(key, entryID: entryID) }
            relay.detach(entryID)
        }
    }
}
