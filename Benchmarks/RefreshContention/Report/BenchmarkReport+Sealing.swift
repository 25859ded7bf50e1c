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
    /// AES-256-GCM alone on the same bytes (medians): the floor of what sealing and opening can cost.
    var aesSealNs: Double
    var aesOpenNs: Double
    /// What sealing and opening add, as multiples of AES-256-GCM alone (the goal: at most 3).
    var sealCostPerAES: Double
    var openCostPerAES: Double
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
                let openCost = Summary(samples.map { $0.sealedLoad - $0.plainLoad }),
                let aesSeal = Summary(samples.map(\.aesSeal)), let aesOpen = Summary(samples.map(\.aesOpen))
            else { continue }
            sealing.append(
                SealingRow(
                    store: kind, operations: operations, plainSaveNs: rounded(plainSave.median, 0),
                    sealedSaveNs: rounded(sealedSave.median, 0), sealedSaveNsMin: rounded(sealedSave.min, 0),
                    sealedSaveNsMax: rounded(sealedSave.max, 0), plainLoadNs: rounded(plainLoad.median, 0),
                    sealedLoadNs: rounded(sealedLoad.median, 0), sealedLoadNsMin: rounded(sealedLoad.min, 0),
                    sealedLoadNsMax: rounded(sealedLoad.max, 0), sealCostNs: rounded(sealCost.median, 0),
                    openCostNs: rounded(openCost.median, 0), aesSealNs: rounded(aesSeal.median, 0),
                    aesOpenNs: rounded(aesOpen.median, 0),
                    sealCostPerAES: rounded(sealCost.median / max(aesSeal.median, 1), 2),
                    openCostPerAES: rounded(openCost.median / max(aesOpen.median, 1), 2)))
        }
    }

    /// Workload H's table, or `nil` when it did not run.
    func sealingSection() -> String? {
        guard !sealing.isEmpty else { return nil }
        var table = TextTable(
            title: "H. Sealing: a record written and read through the store, plain and sealed (AES-256-GCM)",
            headers: [
                "store", "ops", "save ns plain", "save ns sealed", "+seal ns", "load ns plain", "load ns sealed",
                "+open ns", "AES-GCM seal ns", "AES-GCM open ns", "+seal/AES", "+open/AES",
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
                Format.number(row.openCostNs, places: 0), Format.number(row.aesSealNs, places: 0),
                Format.number(row.aesOpenNs, places: 0), Format.number(row.sealCostPerAES, places: 2),
                Format.number(row.openCostPerAES, places: 2),
            ])
        }
        return table.render() + "\n" + Explanations.render(Explanations.sealing)
    }
}
