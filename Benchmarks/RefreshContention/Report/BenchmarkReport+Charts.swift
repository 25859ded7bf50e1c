import Foundation

extension BenchmarkReport {
    /// One chart per measured workload.
    func charts(plan: BenchmarkPlan) -> [Chart] {
        var charts: [Chart] = []
        let mode = "\(mode) run, \(repetitions) repetitions"
        if !hotPath.isEmpty {
            charts.append(
                Chart(
                    name: "hot-path", title: "A. Hot path: cost of one call while the token is fresh",
                    subtitle: "\(Format.integer(plan.hotPathCalls)) calls per point, spread over the tasks; \(mode)",
                    xLabel: "concurrent tasks (log scale)", yLabel: "ns per call, aggregate (log scale)",
                    yScale: .logarithmic,
                    body: .lines(
                        series(hotPath, strategy: \.strategy) { row in
                            Chart.Point(
                                x: Double(row.tasks), y: row.nsPerCall, low: row.nsPerCallMin, high: row.nsPerCallMax)
                        }, xScale: .logarithmic, xTicks: plan.hotPathTasks.map(Double.init))))
        }
        if !contention.isEmpty {
            charts.append(
                Chart(
                    name: "contention", title: "B. Contention: N callers find the token expired at once",
                    subtitle: "Wall time until all N have a token; refresher latency "
                        + "\(Format.duration(plan.contentionLatency)); \(mode)",
                    xLabel: "N concurrent callers (log scale)", yLabel: "wall time, ms (log scale)",
                    yScale: .logarithmic,
                    body: .lines(
                        series(contention, strategy: \.strategy) { row in
                            Chart.Point(x: Double(row.waiters), y: row.wallMs, low: row.wallMsMin, high: row.wallMsMax)
                        }, xScale: .logarithmic, xTicks: nil)))
        }
        if !storm.isEmpty {
            charts.append(
                Chart(
                    name: "storm", title: "C. Storm: throughput while tokens expire every few milliseconds",
                    subtitle: "\(plan.stormTasks) tasks for \(Format.duration(plan.stormDuration)), tokens live "
                        + "\(Format.duration(plan.stormTokenLifetime)); successful calls only; \(mode)",
                    xLabel: "strategy", yLabel: "calls per second (successful)", yScale: .linear,
                    body: .bars(
                        storm.map {
                            Chart.Bar(
                                name: $0.strategy, value: $0.callsPerSecond, low: $0.callsPerSecondMin,
                                high: $0.callsPerSecondMax)
                        }),
                    note: "UserSessionController (default): its loop breaker trips after 3 refreshes within 30 s "
                        + "(5 ms tokens are a refresh loop); later calls fail and are not counted."))
        }
        if !fanout.isEmpty {
            charts.append(
                Chart(
                    name: "fanout", title: "D. Event fan-out: cost of delivering one event to one subscriber",
                    subtitle: "\(Format.integer(plan.fanoutTransitions)) events to every subscriber; "
                        + "same consumers and buffering for all lines; \(mode)",
                    xLabel: "subscribers (log scale)", yLabel: "ns per delivery (log scale)", yScale: .logarithmic,
                    body: .lines(
                        series(fanout, strategy: \.strategy) { row in
                            Chart.Point(
                                x: Double(row.subscribers), y: row.nsPerDelivery, low: row.nsPerDeliveryMin,
                                high: row.nsPerDeliveryMax)
                        }, xScale: .logarithmic, xTicks: plan.fanoutSubscribers.map(Double.init)),
                    note:
                        "AsyncStream fan-out: the floor, paced like the controller; tight loop: a producer that never "
                        + "suspends, so consumers drain in batches."))
        }
        if let row = idleSessions.first {
            var bars = [
                Chart.Bar(
                    name: Self.idleSessionName, value: row.bytesPerSession, low: row.bytesPerSessionMin,
                    high: row.bytesPerSessionMax)
            ]
            if let floor = row.bareCredentialsBytesPerEntry {
                bars.append(
                    Chart.Bar(
                        name: Self.bareCredentialsName, value: floor,
                        low: row.bareCredentialsBytesPerEntryMin ?? floor,
                        high: row.bareCredentialsBytesPerEntryMax ?? floor))
            }
            charts.append(
                Chart(
                    name: "idle-sessions", title: "E. Memory per idle opened session",
                    subtitle: "\(Format.integer(row.sessions)) users held at once; heap bytes in use ÷ users; "
                        + mode,
                    xLabel: "what is held per user", yLabel: "heap bytes per user", yScale: .linear,
                    body: .bars(bars), highlighted: Self.idleSessionName))
        }
        if let chart = restoreStormChart(plan: plan, mode: mode) { charts.append(chart) }
        if let chart = fleetChart(plan: plan, mode: mode) { charts.append(chart) }
        return charts
    }

    static let idleSessionName = "UserSessionRegistry session"
    static let bareCredentialsName = "[String: credentials struct]"

    /// Writes every chart as `DIRECTORY/NAME.svg`; returns the paths written.
    func writeCharts(plan: BenchmarkPlan, to directory: String) throws -> [String] {
        let url = URL(fileURLWithPath: directory, isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return try charts(plan: plan).map { chart in
            let file = url.appendingPathComponent(chart.name + ".svg")
            try Data(chart.svg().utf8).write(to: file, options: .atomic)
            return file.path
        }
    }

    /// Groups `rows` into one series per strategy, in the order the strategies first appear.
    private func series<Row>(
        _ rows: [Row], strategy: KeyPath<Row, String>, point: (Row) -> Chart.Point
    ) -> [Chart.Series] {
        var order: [String] = []
        var points: [String: [Chart.Point]] = [:]
        for row in rows {
            let name = row[keyPath: strategy]
            if points[name] == nil { order.append(name) }
            points[name, default: []].append(point(row))
        }
        return order.map { Chart.Series(name: $0, points: points[$0] ?? []) }
    }
}
