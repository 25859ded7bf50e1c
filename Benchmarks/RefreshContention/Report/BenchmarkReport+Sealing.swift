/// Workload H, one store kind: a write and a read through the plain store and through the sealed one.
struct SealingRow: Encodable {
    /// `memory`, `file` or `postgres`.
    var store: String
    /// Writes and reads made per repetition.
    var operations: Int
    /// Nanoseconds per save, plain and sealed (medians with minimum and maximum over repetitions).
    var plainSaveNs: Double
    var sealedSaveNs: Double
    var sealedSaveNsMin: Double
    var sealedSaveNsMax: Double
    /// Nanoseconds per load, plain and sealed.
    var plainLoadNs: Double
    var sealedLoadNs: Double
    var sealedLoadNsMin: Double
    var sealedLoadNsMax: Double
    /// Median of (sealed − plain) per repetition: what sealing adds to a write, and opening to a load.
    var sealCostNs: Double
    var openCostNs: Double
}

extension BenchmarkReport {
    /// Adds workload H's rows (no invariant: it measures only).
    mutating func add(_ outcome: SealingWorkload.Outcome, plan: BenchmarkPlan) {
        failures += outcome.failures
        notes += outcome.skipped
        for (kind, operations, _) in SealingWorkload.kinds(plan) {
            let samples = outcome.samples.filter { $0.kind == kind }
            guard let plainSave = Summary(samples.map(\.plainSave)),
                let sealedSave = Summary(samples.map(\.sealedSave)),
                let plainLoad = Summary(samples.map(\.plainLoad)), let sealedLoad = Summary(samples.map(\.sealedLoad)),
                let sealCost = Summary(samples.map { $0.sealedSave - $0.plainSave }),
                let openCost = Summary(samples.map { $0.sealedLoad - $0.plainLoad })
            else { continue }
            sealing.append(
                SealingRow(
                    store: kind, operations: operations, plainSaveNs: rounded(plainSave.median, 0),
                    sealedSaveNs: rounded(sealedSave.median, 0), sealedSaveNsMin: rounded(sealedSave.min, 0),
                    sealedSaveNsMax: rounded(sealedSave.max, 0), plainLoadNs: rounded(plainLoad.median, 0),
                    sealedLoadNs: rounded(sealedLoad.median, 0), sealedLoadNsMin: rounded(sealedLoad.min, 0),
                    sealedLoadNsMax: rounded(sealedLoad.max, 0), sealCostNs: rounded(sealCost.median, 0),
                    openCostNs: rounded(openCost.median, 0)))
        }
    }

    /// Workload H's table, or `nil` when it did not run.
    func sealingSection() -> String? {
        guard !sealing.isEmpty else { return nil }
        var table = TextTable(
            title: "H. Sealing: a record written and read through the store, plain and sealed (AES-256-GCM)",
            headers: [
                "store", "ops", "save ns plain", "save ns sealed", "+seal ns", "load ns plain", "load ns sealed",
                "+open ns",
            ],
            labelColumns: 1)
        for row in sealing {
            table.rows.append([
                row.store, Format.integer(row.operations), Format.number(row.plainSaveNs, places: 0),
                Format.summary(
                    Summary(median: row.sealedSaveNs, min: row.sealedSaveNsMin, max: row.sealedSaveNsMax), places: 0),
                Format.number(row.sealCostNs, places: 0), Format.number(row.plainLoadNs, places: 0),
                Format.summary(
                    Summary(median: row.sealedLoadNs, min: row.sealedLoadNsMin, max: row.sealedLoadNsMax), places: 0),
                Format.number(row.openCostNs, places: 0),
            ])
        }
        return table.render() + "\n" + Explanations.render(Explanations.sealing)
    }
}
