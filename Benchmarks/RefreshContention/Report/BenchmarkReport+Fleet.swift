/// Workload G, one store at one number of processes (one run of a few seconds).
struct FleetRow: Encodable {
    /// `file` or `postgres`.
    var store: String
    /// K: processes sharing the user.
    var processes: Int
    /// Tasks per process calling `accessToken()` in a loop.
    var tasksPerProcess: Int
    var durationSeconds: Double
    var tokenLifetimeMs: Double
    /// Tokens that expired: distinct tokens handed out fleet-wide plus the one left in the store, minus one.
    var expiries: Int
    /// Refresh-token grants the OAuth server answered; must equal `expiries`.
    var refreshes: Int
    /// Refreshes the processes reported making (`.credentialsRefreshed`); must equal `refreshes`.
    var processRefreshes: Int
    /// Rotations a process took from the store instead of refreshing (`.credentialsUpdated`, adopted).
    var adoptions: Int
    /// Refresh tokens the server saw used twice; must be 0.
    var reuseDetected: Int
    var invalidGrant: Int
    /// Refresh flights that refreshed, every process: `.refreshStarted` until `.credentialsRefreshed`.
    var refreshP50Ms: Double
    var refreshP99Ms: Double
    /// `refreshP50Ms` / the same store's at K = 1.
    var refreshP50VersusSingle: Double?
    /// Refresh flights that adopted another process's rotation: `.refreshStarted` until the adoption.
    var adoptP50Ms: Double?
    var adoptP99Ms: Double?
    /// Callers' `accessToken()` latency: the worst process's p99, and the longest call of any.
    var callP99Ms: Double
    var callMaxMs: Double
    var calls: Int
    var failedCalls: Int
}

/// Workload G's hot path: `accessToken()` on an open session over one store.
struct FleetHotPathRow: Encodable {
    var store: String
    var calls: Int
    var nsPerCall: Double
    /// Store calls made while the calls ran; 0 means the hot path never touched the store.
    var storeCalls: Int
    /// The store methods called meanwhile, in order (empty when `storeCalls` is 0).
    var storeMethods: [String]
}

extension BenchmarkReport {
    /// Adds workload G's rows and checks its invariant: one refresh per expiry fleet-wide, no reuse detected.
    mutating func add(_ outcome: FleetWorkload.Outcome, plan: BenchmarkPlan) {
        failures += outcome.failures
        notes += outcome.skipped
        for sample in outcome.samples {
            let single = fleet.first { $0.store == sample.kind && $0.processes == 1 }
            let p50 = Percentile.of(sample.refreshMilliseconds, 0.50)
            let row = FleetRow(
                store: sample.kind, processes: sample.nodes, tasksPerProcess: sample.tasks,
                durationSeconds: sample.seconds, tokenLifetimeMs: rounded(plan.fleetTokenLifetime.inSeconds * 1e3, 1),
                expiries: sample.expiries, refreshes: sample.serverRefreshes, processRefreshes: sample.nodeRefreshes,
                adoptions: sample.adopted, reuseDetected: sample.reuseDetected, invalidGrant: sample.invalidGrant,
                refreshP50Ms: rounded(p50, 2),
                refreshP99Ms: rounded(Percentile.of(sample.refreshMilliseconds, 0.99), 2),
                refreshP50VersusSingle: single.map { rounded(p50 / max($0.refreshP50Ms, 1e-9), 2) },
                adoptP50Ms: sample.adoptMilliseconds.isEmpty
                    ? nil : rounded(Percentile.of(sample.adoptMilliseconds, 0.50), 2),
                adoptP99Ms: sample.adoptMilliseconds.isEmpty
                    ? nil : rounded(Percentile.of(sample.adoptMilliseconds, 0.99), 2),
                callP99Ms: rounded(sample.callP99Milliseconds, 2), callMaxMs: rounded(sample.callMaxMilliseconds, 2),
                calls: sample.calls, failedCalls: sample.errors)
            fleet.append(row)
            let label = "fleet \(row.store) K=\(row.processes)"
            if row.refreshes != row.expiries || row.processRefreshes != row.refreshes || row.reuseDetected != 0
                || row.invalidGrant != 0
            {
                invariantViolations.append(
                    "\(label): \(row.refreshes) refreshes (\(row.processRefreshes) by the processes) for "
                        + "\(row.expiries) expiries, \(row.reuseDetected) reuse detections, "
                        + "\(row.invalidGrant) invalid_grant")
            }
            if row.failedCalls > 0 {
                failures.append(
                    "\(label): \(row.failedCalls) accessToken() calls failed (last: \(sample.firstError ?? "?"))")
            }
        }
        for sample in outcome.hot {
            fleetHotPath.append(
                FleetHotPathRow(
                    store: sample.kind, calls: sample.calls, nsPerCall: rounded(sample.nsPerCall, 1),
                    storeCalls: sample.storeCalls, storeMethods: sample.storeMethods))
            if sample.storeCalls > 0 {
                failures.append(
                    "fleet hot path \(sample.kind): \(sample.storeCalls) store calls on an open session: "
                        + sample.storeMethods.joined(separator: ", "))
            }
        }
    }

    /// Workload G's tables with their explanations, or `nil` when it did not run.
    func fleetSection() -> String? {
        guard !fleet.isEmpty || !fleetHotPath.isEmpty else { return nil }
        var table = TextTable(
            title: "G. Fleet: K processes x \(fleet.first?.tasksPerProcess ?? 64) tasks share one user through one "
                + "store and one OAuth server (rotation, reuse detection), tokens living "
                + "\(Format.number(fleet.first?.tokenLifetimeMs ?? 200, places: 0)) ms",
            headers: [
                "store", "K", "seconds", "expiries", "refreshes", "by processes", "adopted", "reuse",
                "refresh p50 ms", "refresh p99 ms", "p50 x K=1", "adopt p50 ms", "adopt p99 ms", "call p99 ms",
                "call max ms", "calls", "failed",
            ],
            labelColumns: 1)
        for row in fleet {
            table.rows.append([
                row.store, "\(row.processes)", Format.number(row.durationSeconds, places: 1),
                Format.integer(row.expiries), Format.integer(row.refreshes), Format.integer(row.processRefreshes),
                Format.integer(row.adoptions), "\(row.reuseDetected)",
                Format.number(row.refreshP50Ms, places: 2), Format.number(row.refreshP99Ms, places: 2),
                row.refreshP50VersusSingle.map { Format.number($0, places: 2) } ?? "-",
                row.adoptP50Ms.map { Format.number($0, places: 2) } ?? "-",
                row.adoptP99Ms.map { Format.number($0, places: 2) } ?? "-",
                Format.number(row.callP99Ms, places: 2), Format.number(row.callMaxMs, places: 2),
                Format.integer(row.calls), "\(row.failedCalls)",
            ])
        }
        var hot = TextTable(
            title: "G. Fleet hot path: accessToken() on an open session over each store (one task)",
            headers: ["store", "calls", "ns/call", "store calls"], labelColumns: 1)
        for row in fleetHotPath {
            hot.rows.append([
                row.store, Format.integer(row.calls), Format.number(row.nsPerCall, places: 1), "\(row.storeCalls)",
            ])
        }
        return table.render() + "\n" + Explanations.render(Explanations.fleet) + "\n\n" + hot.render() + "\n"
            + Explanations.render(Explanations.fleetHotPath)
    }

    /// Workload G's chart: refresh p50 and p99 against K, one pair of lines per store.
    func fleetChart(plan: BenchmarkPlan, mode: String) -> Chart? {
        guard !fleet.isEmpty else { return nil }
        var series: [Chart.Series] = []
        for store in ["file", "postgres"] {
            let rows = fleet.filter { $0.store == store }
            guard !rows.isEmpty else { continue }
            series.append(
                Chart.Series(
                    name: "\(store) store, refresh p50",
                    points: rows.map {
                        Chart.Point(
                            x: Double($0.processes), y: $0.refreshP50Ms, low: $0.refreshP50Ms, high: $0.refreshP50Ms)
                    }))
            series.append(
                Chart.Series(
                    name: "\(store) store, refresh p99",
                    points: rows.map {
                        Chart.Point(
                            x: Double($0.processes), y: $0.refreshP99Ms, low: $0.refreshP99Ms, high: $0.refreshP99Ms)
                    }))
            let adopting = rows.compactMap { row in
                row.adoptP50Ms.map { Chart.Point(x: Double(row.processes), y: $0, low: $0, high: $0) }
            }
            if !adopting.isEmpty {
                series.append(Chart.Series(name: "\(store) store, adopt p50", points: adopting))
            }
        }
        return Chart(
            name: "fleet", title: "G. Fleet: how long a refresh takes as processes share one user",
            subtitle: "K processes x \(plan.fleetTasks) tasks, one store, one OAuth server, tokens living "
                + "\(Format.number(plan.fleetTokenLifetime.inSeconds * 1e3, places: 0)) ms; \(plan.name) mode, one run per K",
            xLabel: "K processes", yLabel: "refresh flight, ms",
            yScale: .linear, body: .lines(series, xScale: .linear, xTicks: plan.fleetNodes.map(Double.init)),
            highlighted: "file store, refresh p50",
            note: "one run per point; refresh: started until refreshed; adopt: started until another process's "
                + "rotation was taken from the store.")
    }
}
