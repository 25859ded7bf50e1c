/// Everything one run measured; `--json` prints it as one document.
///
/// Required keys (issue 5): `hotPath`, `contention`, `storm`, `fanout` with the row fields named there; the
/// other keys are extras.
struct BenchmarkReport: Encodable {
    var benchmark = "RefreshContention"
    var mode: String
    var repetitions: Int
    var hotPath: [HotPathRow] = []
    var contention: [ContentionRow] = []
    var storm: [StormRow] = []
    var fanout: [FanoutRow] = []
    var idleSessions: [IdleSessionsRow] = []
    var restoreStorm: [RestoreStormRow] = []
    var fleet: [FleetRow] = []
    var fleetHotPath: [FleetHotPathRow] = []
    var sealing: [SealingRow] = []
    var clientAssertions: [ClientAssertionRow] = []
    var callbackValidations: [CallbackValidationRow] = []
    var clientCredentials: [ClientCredentialsRow] = []
    /// Each strategy and floor, and the real library or idiom it reproduces.
    var strategies = Explanations.strategies
    /// What this mode left out or how to read a figure.
    var notes: [String] = []
    /// The performance targets (see `evaluateTargets()`): informational, they never change the exit status.
    var targets: [TargetCheck] = []
    /// Coalescing strategies that refreshed more than once per expiry, and restore storms that loaded or restored
    /// a user other than once: these make the exit status 1.
    var invariantViolations: [String] = []
    /// Extra refreshes by strategies that do not coalesce (`NaiveActor`): expected, reported only.
    var expectedViolations: [String] = []
    /// Runs that failed or hung: these make the exit status 2 (unless an invariant broke).
    var failures: [String] = []
    var exitStatus: Int32 = 0
}

/// Workload A, one strategy at one task count.
struct HotPathRow: Encodable {
    var strategy: String
    var tasks: Int
    var calls: Int
    /// Median over repetitions of aggregate wall nanoseconds per call.
    var nsPerCall: Double
    var nsPerCallMin: Double
    var nsPerCallMax: Double
    /// `nsPerCall` divided by `BareMutexRead`'s at the same task count.
    var ratioToBareMutexRead: Double?
}

/// Workload B, one strategy at one number of waiters.
struct ContentionRow: Encodable {
    var strategy: String
    var waiters: Int
    /// Refresher calls for the one expiry: the largest count of any repetition.
    var refreshes: Int
    var refreshesMin: Int
    var wallMs: Double
    var wallMsMin: Double
    var wallMsMax: Double
    /// (wall − refresher latency) / waiters, median over repetitions.
    var overheadNsPerWaiter: Double
    var overheadNsPerWaiterMin: Double
    var overheadNsPerWaiterMax: Double
    /// Resident-memory growth while the waiters wait, per waiter; `null` when no refresh happened to sample it.
    var rssBytesPerWaiter: Double?
    var refresherLatencyMs: Double
    /// Callers that got the expired token back (largest count of any repetition).
    var staleResults: Int
    /// Callers whose call threw (largest count of any repetition).
    var failedCalls: Int

    enum CodingKeys: String, CodingKey {
        case strategy, waiters, refreshes, refreshesMin, wallMs, wallMsMin, wallMsMax
        case overheadNsPerWaiter, overheadNsPerWaiterMin, overheadNsPerWaiterMax
        case rssBytesPerWaiter, refresherLatencyMs, staleResults, failedCalls
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(strategy, forKey: .strategy)
        try container.encode(waiters, forKey: .waiters)
        try container.encode(refreshes, forKey: .refreshes)
        try container.encode(refreshesMin, forKey: .refreshesMin)
        try container.encode(wallMs, forKey: .wallMs)
        try container.encode(wallMsMin, forKey: .wallMsMin)
        try container.encode(wallMsMax, forKey: .wallMsMax)
        try container.encode(overheadNsPerWaiter, forKey: .overheadNsPerWaiter)
        try container.encode(overheadNsPerWaiterMin, forKey: .overheadNsPerWaiterMin)
        try container.encode(overheadNsPerWaiterMax, forKey: .overheadNsPerWaiterMax)
        // Always present, `null` when not measured.
        try container.encode(rssBytesPerWaiter, forKey: .rssBytesPerWaiter)
        try container.encode(refresherLatencyMs, forKey: .refresherLatencyMs)
        try container.encode(staleResults, forKey: .staleResults)
        try container.encode(failedCalls, forKey: .failedCalls)
    }
}

/// Workload C, one strategy; counts are totals over all repetitions.
struct StormRow: Encodable {
    var strategy: String
    var tasks: Int
    var durationSeconds: Double
    var tokenLifetimeMs: Double
    /// Distinct tokens that had to be refreshed, summed over repetitions.
    var expiries: Int
    /// Refresher calls, summed over repetitions; equals `expiries` unless a token was refreshed twice.
    var refreshes: Int
    var callsPerSecond: Double
    var callsPerSecondMin: Double
    var callsPerSecondMax: Double
    var failedCalls: Int
}

/// Workload E.
struct IdleSessionsRow: Encodable {
    /// Sessions opened and held at once.
    var sessions: Int
    /// Heap bytes in use per session (the allocator's), median over repetitions (min and max beside it).
    var bytesPerSession: Double
    var bytesPerSessionMin: Double
    var bytesPerSessionMax: Double
    /// Resident memory growth per session, median over repetitions: less than ``bytesPerSession`` when the
    /// sessions reuse memory freed earlier.
    var residentBytesPerSession: Double?
    /// The floor: heap bytes in use per entry of a dictionary of bare credential structs for the same users.
    var bareCredentialsBytesPerEntry: Double?
    var bareCredentialsBytesPerEntryMin: Double?
    var bareCredentialsBytesPerEntryMax: Double?
}

/// Workload D, one event source at one number of subscribers.
struct FanoutRow: Encodable {
    /// `UserSessionController`, or `AsyncStream fan-out` (the floor).
    var strategy: String
    var subscribers: Int
    /// Lifecycle transitions driven (alternating open and close); each is one event per subscriber.
    var events: Int
    /// Events delivered to all subscribers together (median over repetitions).
    var deliveries: Int
    var nsPerDelivery: Double
    var nsPerDeliveryMin: Double
    var nsPerDeliveryMax: Double
    /// `nsPerDelivery` divided by the bare `AsyncStream` fan-out's at the same number of subscribers.
    var ratioToAsyncStream: Double?
    var rssBytesPerSubscriber: Double?
    var rssGrowthBytesDuringTransitions: Double?

    enum CodingKeys: String, CodingKey {
        case strategy, subscribers, events, deliveries, nsPerDelivery, nsPerDeliveryMin, nsPerDeliveryMax
        case ratioToAsyncStream, rssBytesPerSubscriber, rssGrowthBytesDuringTransitions
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(strategy, forKey: .strategy)
        try container.encode(subscribers, forKey: .subscribers)
        try container.encode(events, forKey: .events)
        try container.encode(deliveries, forKey: .deliveries)
        try container.encode(nsPerDelivery, forKey: .nsPerDelivery)
        try container.encode(nsPerDeliveryMin, forKey: .nsPerDeliveryMin)
        try container.encode(nsPerDeliveryMax, forKey: .nsPerDeliveryMax)
        try container.encode(ratioToAsyncStream, forKey: .ratioToAsyncStream)
        try container.encode(rssBytesPerSubscriber, forKey: .rssBytesPerSubscriber)
        try container.encode(rssGrowthBytesDuringTransitions, forKey: .rssGrowthBytesDuringTransitions)
    }
}

/// One performance target and whether this run met it.
struct TargetCheck: Encodable {
    var target: String
    /// `nil` when the run did not measure what the target needs.
    var holds: Bool?
    var detail: String

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(target, forKey: .target)
        try container.encode(holds, forKey: .holds)
        try container.encode(detail, forKey: .detail)
    }

    enum CodingKeys: String, CodingKey {
        case target, holds, detail
    }
}
