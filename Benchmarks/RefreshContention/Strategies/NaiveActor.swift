/// An actor that awaits the refresher directly whenever the token has expired: no coalescing.
///
/// Actor reentrancy lets every caller that arrives while a refresh is in flight start its own refresh of the same
/// token; the benchmark reports that, it does not fail on it.
actor NaiveActor: TokenSource {
    private var current: String
    private var expiresAt: Double
    private let clock: BenchClock
    private let refresher: SimulatedRefresher

    init(token: String, expiresAt: Double, clock: BenchClock, refresher: SimulatedRefresher) {
        self.current = token
        self.expiresAt = expiresAt
        self.clock = clock
        self.refresher = refresher
    }

    func token() async throws -> String {
        if clock.seconds() < expiresAt { return current }
        let issued = try await refresher.refresh(from: current)
        current = issued.token
        expiresAt = issued.expiresAt
        return issued.token
    }
}
