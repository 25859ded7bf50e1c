/// Workload J: one ES256 client assertion (private_key_jwt) per token request.
struct ClientAssertionRow: Encodable {
    /// The algorithm.
    var algorithm: String
    /// Assertions made per repetition.
    var assertions: Int
    /// Nanoseconds per assertion (median with minimum and maximum over repetitions).
    var assertionNs: Double
    var assertionNsMin: Double
    var assertionNsMax: Double
}

extension BenchmarkReport {
    /// Adds workload J's row (no invariant: it measures only).
    mutating func add(_ outcome: ClientAssertionWorkload.Outcome, plan: BenchmarkPlan) {
        failures += outcome.failures
        notes += outcome.skipped
        guard let summary = Summary(outcome.samples) else { return }
        clientAssertions.append(
            ClientAssertionRow(
                algorithm: "ES256", assertions: plan.clientAssertions, assertionNs: rounded(summary.median, 0),
                assertionNsMin: rounded(summary.min, 0), assertionNsMax: rounded(summary.max, 0)))
    }

    /// Workload J's table, or `nil` when it did not run.
    func clientAssertionSection() -> String? {
        guard !clientAssertions.isEmpty else { return nil }
        var table = TextTable(
            title: "J. private_key_jwt: one client assertion made per token request (PrivateKeyJWTSigner, jwt-kit)",
            headers: ["algorithm", "assertions", "ns/assertion"], labelColumns: 1)
        for row in clientAssertions {
            table.rows.append([
                row.algorithm, Format.integer(row.assertions),
                Format.summary(
                    Summary(median: row.assertionNs, min: row.assertionNsMin, max: row.assertionNsMax), places: 0),
            ])
        }
        return table.render() + "\n" + Explanations.render(Explanations.clientAssertion)
    }
}
