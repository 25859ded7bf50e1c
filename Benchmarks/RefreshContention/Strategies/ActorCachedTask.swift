/// The common idiom: an actor that stores the in-flight refresh as a `Task` and lets followers await its value.
actor ActorCachedTask: TokenSource {
    private var current: String
    private var expiresAt: Double
    private var refreshTask: Task<String, any Error>?
    private let clock: BenchClock
    private let refresher: SimulatedRefresher

    init(token: String, expiresAt: Double, clock: BenchClock, refresher: SimulatedRefresher) {
        self.current = token
        self.expiresAt = expiresAt
        self.clock = clock
        self.refresher = refresher
    }

    func token() async throws -> String {
        if let refreshTask { return try await refreshTask.value }
        if clock.seconds() < expiresAt { return current }
        let stale = current
        // The task inherits the actor's isolation; it cannot start before this method suspends below, so
        // `refreshTask` is set before the task can clear it.
        let task = Task<String, any Error> {
            defer { self.refreshTask = nil }
            let issued = try await self.refresher.refresh(from: stale)
            self.current = issued.token
            self.expiresAt = issued.expiresAt
            return issued.token
        }
        refreshTask = task
        return try await task.value
    }
}
