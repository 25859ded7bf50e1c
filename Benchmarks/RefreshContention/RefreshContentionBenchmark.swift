import Foundation

/// Runs the selected workloads, prints the report and returns the exit status.
struct RefreshContentionBenchmark {
    let options: BenchmarkOptions

    func run() async -> Int32 {
        var plan = options.quick ? BenchmarkPlan.quick : BenchmarkPlan.full
        if let waiters = options.waiters { plan.contentionWaiters = waiters }
        if let requests = options.requests { plan.restoreStormRequests = requests }
        if let users = options.users { plan.restoreStormUsers = users }
        var report = BenchmarkReport(mode: plan.name, repetitions: plan.repetitions)
        for (strategy, maximum) in plan.contentionMaximumWaiters.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            report.notes.append(
                "contention: \(strategy.rawValue) runs only up to N = \(Format.integer(maximum)) in \(plan.name) mode")
        }
        report.notes.append(
            "contention: the refresher holds its refresh until all N callers have called, then sleeps its latency; "
                + "overhead per waiter = (wall - measured refresher latency) / N; RSS is sampled at the end of the "
                + "first refresh, against a baseline taken with all callers parked on the start gate")
        report.notes.append(
            "storm: expiries = distinct tokens the refresher was asked to refresh; refreshes = refresher calls")
        let clock = ContinuousClock()
        let start = clock.now
        Progress.note("RefreshContention: \(plan.name) run, \(plan.repetitions) repetitions per figure")

        if options.workloads.contains(.hotPath) {
            let progress = ProgressLine(workload: "hot path", total: HotPathWorkload.weight(plan))
            report.add(await HotPathWorkload(plan: plan).run(progress: progress), plan: plan)
            progress.finish()
        }
        if options.workloads.contains(.contention) {
            let progress = ProgressLine(workload: "contention", total: ContentionWorkload.weight(plan))
            report.add(await ContentionWorkload(plan: plan).run(progress: progress), plan: plan)
            progress.finish()
        }
        if options.workloads.contains(.storm) {
            let progress = ProgressLine(workload: "storm", total: StormWorkload.weight(plan))
            report.add(await StormWorkload(plan: plan).run(progress: progress), plan: plan)
            progress.finish()
        }
        if options.workloads.contains(.fanout) {
            let progress = ProgressLine(workload: "fan-out", total: FanoutWorkload.weight(plan))
            report.add(await FanoutWorkload(plan: plan).run(progress: progress), plan: plan)
            progress.finish()
        }
        if options.workloads.contains(.sessions) {
            let progress = ProgressLine(workload: "sessions", total: IdleSessionsWorkload.weight(plan))
            report.add(await IdleSessionsWorkload(plan: plan).run(progress: progress))
            progress.finish()
        }
        if options.workloads.contains(.restoreStorm) {
            let progress = ProgressLine(workload: "restore", total: RestoreStormWorkload.weight(plan))
            report.add(await RestoreStormWorkload(plan: plan).run(progress: progress), plan: plan)
            progress.finish()
        }
        if options.workloads.contains(.fleet), !options.quick || options.chosen {
            let progress = ProgressLine(workload: "fleet", total: FleetWorkload.weight(plan))
            report.add(await FleetWorkload(plan: plan).run(progress: progress), plan: plan)
            progress.finish()
        }
        if options.workloads.contains(.sealing) {
            let progress = ProgressLine(workload: "sealing", total: SealingWorkload.weight(plan))
            report.add(await SealingWorkload(plan: plan).run(progress: progress), plan: plan)
            progress.finish()
        }
        if options.workloads.contains(.clientCredentials) {
            let progress = ProgressLine(workload: "client credentials", total: ClientCredentialsWorkload.weight(plan))
            report.add(await ClientCredentialsWorkload(plan: plan).run(progress: progress), plan: plan)
            progress.finish()
        }
        if options.workloads.contains(.clientAssertion) {
            let progress = ProgressLine(workload: "assertion", total: ClientAssertionWorkload.weight(plan))
            report.add(await ClientAssertionWorkload(plan: plan).run(progress: progress), plan: plan)
            progress.finish()
        }
        if options.workloads.contains(.callback) {
            let progress = ProgressLine(workload: "callback", total: CallbackValidationWorkload.weight(plan))
            report.add(await CallbackValidationWorkload(plan: plan).run(progress: progress), plan: plan)
            progress.finish()
        }
        report.evaluateTargets()
        report.exitStatus = report.invariantViolations.isEmpty ? (report.failures.isEmpty ? 0 : 2) : 1
        if let directory = options.chartsDirectory {
            do {
                let paths = try report.writeCharts(plan: plan, to: directory)
                Progress.note("RefreshContention: charts: \(paths.joined(separator: ", "))")
            } catch {
                Progress.note("RefreshContention: could not write the charts to \(directory): \(error)")
                report.failures.append("charts: could not write to \(directory): \(error)")
                if report.exitStatus == 0 { report.exitStatus = 2 }
            }
        }
        Progress.note("RefreshContention: finished in \(Format.number((clock.now - start).inSeconds, places: 1)) s")

        if options.json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            do {
                print(String(decoding: try encoder.encode(report), as: UTF8.self))
            } catch {
                Progress.note("RefreshContention: could not encode the report: \(error)")
                return 2
            }
        } else {
            print(report.renderTables(plan: plan))
        }
        return report.exitStatus
    }
}
