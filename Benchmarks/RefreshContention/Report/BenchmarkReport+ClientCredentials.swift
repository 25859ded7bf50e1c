/// Workload I, one strategy at one number of callers.
struct ClientCredentialsRow: Encodable {
    var strategy: String
    var callers: Int
    /// Token requests for the one expiry: the largest count of any repetition (and the smallest).
    var tokenRequests: Int
    var tokenRequestsMin: Int
    var wallMs: Double
    var wallMsMin: Double
    var wallMsMax: Double
    /// (wall − the endpoint's latency) / callers, median over repetitions.
    var nsPerCaller: Double
    var nsPerCallerMin: Double
    var nsPerCallerMax: Double
    /// Callers that got the expired token back, and callers whose call threw (largest of any repetition).
    var staleResults: Int
    var failedCalls: Int
}

extension BenchmarkReport {
    /// Adds workload I's rows and checks its invariant: one token request per expiry for the strategies that
    /// coalesce (the manager, and the actor caching a `Task` per key).
    mutating func add(_ outcome: ClientCredentialsWorkload.Outcome, plan: BenchmarkPlan) {
        failures += outcome.failures
        for callers in plan.clientCredentialsCallers {
            for contender in ClientCredentialsWorkload.Contender.allCases {
                guard let samples = outcome.samples[contender]?[callers], !samples.isEmpty,
                    let wall = Summary(samples.map { $0.wall.inNanoseconds / 1e6 }),
                    let perCaller = Summary(samples.map { ($0.wall - $0.latency).inNanoseconds / Double(callers) })
                else { continue }
                let requests = samples.map(\.requests)
                let row = ClientCredentialsRow(
                    strategy: contender.rawValue, callers: callers, tokenRequests: requests.max() ?? 0,
                    tokenRequestsMin: requests.min() ?? 0, wallMs: rounded(wall.median, 3),
                    wallMsMin: rounded(wall.min, 3), wallMsMax: rounded(wall.max, 3),
                    nsPerCaller: rounded(perCaller.median, 1), nsPerCallerMin: rounded(perCaller.min, 1),
                    nsPerCallerMax: rounded(perCaller.max, 1), staleResults: samples.map(\.staleResults).max() ?? 0,
                    failedCalls: samples.map(\.failedCalls).max() ?? 0)
                clientCredentials.append(row)
                if row.tokenRequests != 1 || row.tokenRequestsMin != 1 {
                    let message =
                        "client credentials: \(contender.rawValue) made \(Self.range(row.tokenRequestsMin, row.tokenRequests)) "
                        + "token requests for one expiry with \(callers) callers"
                    if contender.coalesces {
                        invariantViolations.append(message)
                    } else {
                        expectedViolations.append(message)
                    }
                }
                if row.staleResults > 0 || row.failedCalls > 0 {
                    failures.append(
                        "client credentials: \(contender.rawValue) N=\(callers): \(row.staleResults) expired tokens "
                            + "handed out, \(row.failedCalls) calls failed")
                }
            }
        }
    }

    /// Workload I's table, or `nil` when it did not run.
    func clientCredentialsSection() -> String? {
        guard !clientCredentials.isEmpty else { return nil }
        var table = TextTable(
            title: "I. Client-credentials stampede: N callers at the expiry of the server's own token for one key",
            headers: ["strategy", "callers", "token requests", "wall ms", "ns/caller", "stale", "failed"],
            labelColumns: 1)
        for row in clientCredentials {
            table.rows.append([
                row.strategy, Format.integer(row.callers), Self.range(row.tokenRequestsMin, row.tokenRequests),
                Format.summary(Summary(median: row.wallMs, min: row.wallMsMin, max: row.wallMsMax), places: 2),
                Format.summary(
                    Summary(median: row.nsPerCaller, min: row.nsPerCallerMin, max: row.nsPerCallerMax), places: 0),
                "\(row.staleResults)", "\(row.failedCalls)",
            ])
        }
        return table.render() + "\n"
            + "  ns/caller = (wall - the endpoint's measured latency) / N; the endpoint holds its answer until all N\n"
            + "  callers have called. ActorCachedTask per key: an actor caching the in-flight Task per scope set (the\n"
            + "  idiom); Cache without single flight: a locked dictionary, every caller that finds the token expired\n"
            + "  asks. Both run up to N = 10,000: the idiom's wake-ups grow quadratically (at N = 100,000 it did not\n"
            + "  finish within the 120-s run limit)."
    }
}
