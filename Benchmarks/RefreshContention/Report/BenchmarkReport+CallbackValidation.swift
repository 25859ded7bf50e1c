/// Workload K, one algorithm: an ID token validated by the client, and by jwt-kit's verify alone.
struct CallbackValidationRow: Encodable {
    /// `RS256`, `ES256` or `EdDSA`.
    var algorithm: String
    /// Validations per repetition, each way.
    var validations: Int
    /// Nanoseconds per validation (medians, with minimum and maximum over repetitions for ours).
    var oursNs: Double
    var oursNsMin: Double
    var oursNsMax: Double
    var jwtKitNs: Double
    /// `oursNs / jwtKitNs`.
    var ratio: Double
}

extension BenchmarkReport {
    /// Adds workload K's rows (no invariant: it measures only).
    mutating func add(_ outcome: CallbackValidationWorkload.Outcome, plan: BenchmarkPlan) {
        failures += outcome.failures
        notes += outcome.skipped
        for algorithm in CallbackValidationWorkload.algorithms {
            let samples = outcome.samples.filter { $0.algorithm == algorithm }
            guard let ours = Summary(samples.map(\.ours)), let jwtKit = Summary(samples.map(\.jwtKit)) else { continue }
            callbackValidations.append(
                CallbackValidationRow(
                    algorithm: algorithm, validations: plan.callbackValidations, oursNs: rounded(ours.median, 0),
                    oursNsMin: rounded(ours.min, 0), oursNsMax: rounded(ours.max, 0),
                    jwtKitNs: rounded(jwtKit.median, 0), ratio: rounded(ours.median / max(jwtKit.median, 1), 2)))
        }
    }

    /// Workload K's table, or `nil` when it did not run.
    func callbackValidationSection() -> String? {
        guard !callbackValidations.isEmpty else { return nil }
        var table = TextTable(
            title: "K. Callback validation: an ID token checked by the client against jwt-kit's verify alone",
            headers: ["algorithm", "validations", "ns ours", "ns jwt-kit", "x jwt-kit"], labelColumns: 1)
        for row in callbackValidations {
            table.rows.append([
                row.algorithm, Format.integer(row.validations),
                Format.summary(Summary(median: row.oursNs, min: row.oursNsMin, max: row.oursNsMax), places: 0),
                Format.number(row.jwtKitNs, places: 0), Format.number(row.ratio, places: 2),
            ])
        }
        return table.render() + "\n" + Explanations.render(Explanations.callbackValidation)
    }
}
