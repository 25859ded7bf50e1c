/// Workload J: what sender-constrained requests add: a private_key_jwt assertion per token request, and a DPoP proof
/// per API request against the same request's bearer header.
struct ClientAssertionRow: Encodable {
    /// The request the cost is added to (`token request`, `API request`).
    var request: String
    /// What is made for it (`private_key_jwt assertion`, `bearer token`, `DPoP proof`).
    var what: String
    /// The algorithm, `-` for none.
    var algorithm: String
    /// Requests made per repetition.
    var requests: Int
    /// Nanoseconds per request (median with minimum and maximum over repetitions).
    var requestNs: Double
    var requestNsMin: Double
    var requestNsMax: Double
}

extension BenchmarkReport {
    /// Adds workload J's rows (no invariant: it measures only).
    mutating func add(_ outcome: ClientAssertionWorkload.Outcome, plan: BenchmarkPlan) {
        failures += outcome.failures
        notes += outcome.skipped
        for row in outcome.rows {
            guard let summary = Summary(row.samples) else { continue }
            clientAssertions.append(
                ClientAssertionRow(
                    request: row.request, what: row.what, algorithm: row.algorithm, requests: plan.clientAssertions,
                    requestNs: rounded(summary.median, 0), requestNsMin: rounded(summary.min, 0),
                    requestNsMax: rounded(summary.max, 0)))
        }
    }

    /// Workload J's table, or `nil` when it did not run.
    func clientAssertionSection() -> String? {
        guard !clientAssertions.isEmpty else { return nil }
        let bearer = clientAssertions.first { $0.what == "bearer token" }?.requestNs
        var table = TextTable(
            title: "J. Sender-constrained requests: a private_key_jwt assertion per token request, a DPoP proof per "
                + "API request",
            headers: ["request", "made per request", "algorithm", "requests", "ns/request", "added to bearer ns"],
            labelColumns: 3)
        for row in clientAssertions {
            let added = row.request == "API request" ? bearer.map { Format.integer(Int(row.requestNs - $0)) } : nil
            table.rows.append([
                row.request, row.what, row.algorithm, Format.integer(row.requests),
                Format.summary(
                    Summary(median: row.requestNs, min: row.requestNsMin, max: row.requestNsMax), places: 0),
                added ?? "-",
            ])
        }
        return table.render() + "\n" + Explanations.render(Explanations.clientAssertion)
    }
}
