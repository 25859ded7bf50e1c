extension UserSessionRegistry {
    typealias LaneKey = RegistryLanes<CheckedContinuation<Void, Never>>.Key
    typealias Ticket = RegistryLanes<CheckedContinuation<Void, Never>>.Ticket

    /// Runs `body` in its turn in `key`'s lane: after every operation called before it for that lane has finished,
    /// and before any called after it starts.
    ///
    /// The ticket is taken synchronously when this is called, before the first suspension, so the lane's order is
    /// the call order. Waiting for the turn is not cut short by cancellation: `body` still runs (and the
    /// controller calls in it see the cancellation), so that every operation that was called takes effect.
    func withTurn<Value>(
        _ key: LaneKey,
        _ body: () async throws -> Value
    ) async rethrows -> Value {
        let (ticket, runsNow) = state.withLock { $0.lanes.enter(key) }
        if !runsNow { await waitForTurn(ticket) }
        defer { leave(ticket) }
        return try await body()
    }

    /// Suspends until `ticket` is at the head of its lane.
    func waitForTurn(_ ticket: Ticket) async {
        await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            state.withLock { $0.lanes.park(continuation, ticket: ticket) }?.resumeVisibly()
        }
    }

    /// Ends the turn of `ticket` and resumes the next operation in its lane.
    func leave(_ ticket: Ticket) {
        state.withLock { $0.lanes.leave(ticket) }?.resumeVisibly()
    }

    /// How many operations for `identifier` are running or waiting (for tests).
    func pendingOperationCount(for identifier: String) -> Int {
        state.withLock { $0.lanes.count(.user(ExactIdentifier(identifier))) }
    }

    /// How many `switchUser(to:)` and `restoreCurrentUser()` calls are running or waiting (for tests).
    var pendingSwitchCount: Int { state.withLock { $0.lanes.count(.switching) } }
}
