/// The sizes of one benchmark run.
struct BenchmarkPlan: Sendable {
    var name: String
    /// Repetitions of every configuration; tables show their median, minimum and maximum.
    var repetitions = 3
    /// Workload A: concurrent tasks, and calls in total per configuration.
    var hotPathTasks = [1, 2, 8, 64]
    var hotPathCalls = 1_000_000
    /// Workload B: callers released together at one expiry, and the refresher's latency.
    var contentionWaiters = [10, 100, 1_000, 10_000, 100_000]
    var contentionLatency: Duration = .milliseconds(1)
    /// The largest N a strategy is run at, where it is smaller than the largest of `contentionWaiters`.
    var contentionMaximumWaiters: [Strategy: Int] = [:]
    /// Workload C: tasks calling in a loop for `stormDuration`, tokens living `stormTokenLifetime`.
    var stormTasks = 64
    var stormDuration: Duration = .seconds(2)
    var stormTokenLifetime: Duration = .milliseconds(5)
    var stormLatency: Duration = .milliseconds(1)
    /// Workload D: numbers of event subscribers, and lifecycle transitions (alternating open and close).
    var fanoutSubscribers = [100, 1_000, 10_000]
    var fanoutTransitions = 400
    /// Workload E: idle opened sessions held at once.
    var idleSessions = 10_000
    /// Workload F: first requests released together after a restart, and the stored users they are spread over.
    var restoreStormRequests = [1_000, 10_000]
    var restoreStormUsers = [1, 1_000]
    /// Workload G: processes sharing one user, tasks per process, how long they call, the tokens' lifetime, and
    /// the calls of its hot-path rows.
    var fleetNodes = [1, 2, 4]
    var fleetTasks = 64
    var fleetDuration: Duration = .seconds(4)
    var fleetTokenLifetime: Duration = .milliseconds(200)
    var fleetHotPathCalls = 1_000_000
    /// Workload H: writes and reads per repetition through the in-memory store (the file store makes a fiftieth,
    /// the PostgreSQL store a twentieth).
    var sealingOperations = 20_000
    /// Workload J: requests (assertions, API request headers) made per repetition and row.
    var clientAssertions = 20_000
    /// Workload K: ID tokens validated per algorithm and repetition, by the client and by jwt-kit alone.
    var callbackValidations = 5_000
    /// Workload I: callers released together at the expiry of the server's own token, and the largest N of the
    /// strategies that cannot take the largest of them in reasonable time (by their table names).
    var clientCredentialsCallers = [10, 100, 1_000, 10_000, 100_000]
    /// (The idiom's wake-ups grow quadratically: at N = 100,000 it did not finish within the 120-s run limit.)
    var clientCredentialsMaximumCallers: [String: Int] = [
        "Cache without single flight": 10_000, "ActorCachedTask per key": 10_000,
    ]
    /// The longest a single run may take before it is reported as hung.
    var runLimit: Duration = .seconds(120)

    /// The full benchmark (issue 5).
    static let full = BenchmarkPlan(name: "full")

    /// A reduced set that finishes within about a minute on two cores.
    static let quick = BenchmarkPlan(
        name: "quick",
        hotPathCalls: 200_000,
        // ActorCachedTask's wake-ups grow quadratically (about 2 s at N = 30,000, 25 s at N = 100,000).
        contentionMaximumWaiters: [.actorCachedTask: 10_000],
        stormDuration: .milliseconds(500),
        fanoutTransitions: 40,
        fleetDuration: .seconds(2),
        fleetHotPathCalls: 200_000,
        sealingOperations: 2_000,
        clientAssertions: 2_000,
        callbackValidations: 500,
        clientCredentialsCallers: [10, 100, 1_000, 10_000],
        runLimit: .seconds(20)
    )
}
