extension UserSessionController {
    /// Shuts the controller down, as ``shutdown()`` does, if nothing is in progress in it: no lifecycle call
    /// running or waiting, no refresh in flight, no write of credentials in progress. Returns whether it did.
    ///
    /// The check and the start of the shutdown happen in one step on the actor (the shutdown takes its turn before
    /// its first suspension), so an open or restore is never rolled back by it: one that was called before is seen
    /// by the check, and one called after finds the controller shut down.
    func shutdownIfIdle() async -> Bool {
        guard lifecycle.isIdle, !gate.hasWorkInProgress else { return false }
        await shutdown()
        return true
    }

    /// When a token of this controller was last asked for, in seconds since the reference date (to the second).
    nonisolated var lastTokenDemand: Double { gate.lastTokenDemand }
}
