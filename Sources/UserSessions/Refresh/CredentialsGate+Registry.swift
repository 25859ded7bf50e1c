extension CredentialsGate {
    /// Records that a token was asked for at `now` (seconds since the reference date), for the registry's idle
    /// eviction.
    ///
    /// On the hot path, so it writes at most once a second per session: the shared cache line is only read by
    /// every other call in that second.
    @inline(__always)
    func noteDemand(_ now: Double) {
        if now - Double(bitPattern: lastDemandBits.load(ordering: .relaxed)) >= 1 {
            lastDemandBits.store(now.bitPattern, ordering: .relaxed)
        }
    }

    /// When a token was last asked for, in seconds since the reference date (to the second), or 0 if never.
    var lastTokenDemand: Double { Double(bitPattern: lastDemandBits.load(ordering: .relaxed)) }

    /// Whether a refresh is in flight or a write to the store is in progress: the registry never evicts a session
    /// while its credentials are being committed.
    /// The ledger's work counts too: nothing with a refresh in flight or an unwritten rotation is evicted.
    var hasWorkInProgress: Bool {
        let (busy, identifier) = inspect { ($0.flights.isRefreshing || $0.slot.isHeld, $0.identifier) }
        return busy || (!identifier.isEmpty && ledger.hasPendingWork(identifier))
    }
}
