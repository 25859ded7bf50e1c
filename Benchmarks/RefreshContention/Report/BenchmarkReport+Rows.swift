extension BenchmarkReport {
    /// Adds workload A's rows; ratios are taken against `BareMutexRead` at the same task count.
    mutating func add(_ outcome: HotPathWorkload.Outcome, plan: BenchmarkPlan) {
        failures += outcome.failures
        for tasks in plan.hotPathTasks {
            let floor = outcome.samples[.bareMutexRead]?[tasks].flatMap(Summary.init)
            for strategy in Strategy.hotPath {
                guard let values = outcome.samples[strategy]?[tasks], let summary = Summary(values) else { continue }
                let callsPerTask = (plan.hotPathCalls + tasks - 1) / tasks
                hotPath.append(
                    HotPathRow(
                        strategy: strategy.rawValue, tasks: tasks, calls: callsPerTask * tasks,
                        nsPerCall: rounded(summary.median), nsPerCallMin: rounded(summary.min),
                        nsPerCallMax: rounded(summary.max),
                        ratioToBareMutexRead: floor.map { rounded(summary.median / $0.median, 3) }))
            }
        }
    }

    /// Adds workload B's rows and checks its invariant: one refresh for the one expiry.
    mutating func add(_ outcome: ContentionWorkload.Outcome, plan: BenchmarkPlan) {
        failures += outcome.failures
        for waiters in plan.contentionWaiters {
            for strategy in Strategy.refreshing {
                guard let samples = outcome.samples[strategy]?[waiters], !samples.isEmpty,
                    let wall = Summary(samples.map { $0.wall.inNanoseconds / 1e6 }),
                    let overhead = Summary(
                        samples.map { ($0.wall - $0.refresherLatency).inNanoseconds / Double(waiters) }),
                    let latency = Summary(samples.map { $0.refresherLatency.inNanoseconds / 1e6 })
                else { continue }
                let refreshes = samples.map(\.refreshes)
                let resident = Summary(
                    samples.compactMap { $0.residentGrowthBytes.map { Double($0) / Double(waiters) } })
                let row = ContentionRow(
                    strategy: strategy.rawValue, waiters: waiters, refreshes: refreshes.max() ?? 0,
                    refreshesMin: refreshes.min() ?? 0, wallMs: rounded(wall.median, 3),
                    wallMsMin: rounded(wall.min, 3), wallMsMax: rounded(wall.max, 3),
                    overheadNsPerWaiter: rounded(overhead.median, 1), overheadNsPerWaiterMin: rounded(overhead.min, 1),
                    overheadNsPerWaiterMax: rounded(overhead.max, 1),
                    rssBytesPerWaiter: resident.map { rounded($0.median, 1) },
                    refresherLatencyMs: rounded(latency.median, 3),
                    staleResults: samples.map(\.staleResults).max() ?? 0,
                    failedCalls: samples.map(\.failedCalls).max() ?? 0)
                contention.append(row)
                if row.refreshes > 1 {
                    let message =
                        "contention: \(strategy.rawValue) made \(row.refreshes) refreshes for one expiry "
                        + "with \(waiters) waiters"
                    if strategy.coalesces {
                        invariantViolations.append(message)
                    } else {
                        expectedViolations.append(message)
                    }
                }
            }
        }
    }

    /// Adds workload C's rows and checks its invariant: no token refreshed twice.
    mutating func add(_ outcome: StormWorkload.Outcome, plan: BenchmarkPlan) {
        failures += outcome.failures
        for strategy in Strategy.refreshing {
            guard let samples = outcome.samples[strategy], !samples.isEmpty,
                let rate = Summary(samples.map { Double($0.calls) / max($0.elapsed.inSeconds, 1e-9) })
            else { continue }
            let row = StormRow(
                strategy: strategy.rawValue, tasks: plan.stormTasks, durationSeconds: plan.stormDuration.inSeconds,
                tokenLifetimeMs: plan.stormTokenLifetime.inSeconds * 1e3,
                expiries: samples.map(\.expiries).reduce(0, +), refreshes: samples.map(\.refreshes).reduce(0, +),
                callsPerSecond: rounded(rate.median, 0), callsPerSecondMin: rounded(rate.min, 0),
                callsPerSecondMax: rounded(rate.max, 0), failedCalls: samples.map(\.failedCalls).reduce(0, +))
            storm.append(row)
            // refreshes >= expiries in every repetition, so equal totals mean equal in every repetition.
            if row.refreshes > row.expiries {
                let message =
                    "storm: \(strategy.rawValue) made \(row.refreshes) refreshes for \(row.expiries) expiries"
                if strategy.coalesces {
                    invariantViolations.append(message)
                } else {
                    expectedViolations.append(message)
                }
            }
        }
    }

    /// Adds workload E's row, with the floor beside it.
    mutating func add(_ outcome: IdleSessionsWorkload.Outcome) {
        failures += outcome.failures
        guard let bytes = Summary(outcome.bytesPerSession) else { return }
        let floor = Summary(outcome.bytesPerBareEntry)
        let resident = Summary(outcome.residentBytesPerSession)
        idleSessions.append(
            IdleSessionsRow(
                sessions: outcome.sessions, bytesPerSession: rounded(bytes.median, 0),
                bytesPerSessionMin: rounded(bytes.min, 0), bytesPerSessionMax: rounded(bytes.max, 0),
                residentBytesPerSession: resident.map { rounded($0.median, 0) },
                bareCredentialsBytesPerEntry: floor.map { rounded($0.median, 0) },
                bareCredentialsBytesPerEntryMin: floor.map { rounded($0.min, 0) },
                bareCredentialsBytesPerEntryMax: floor.map { rounded($0.max, 0) }))
    }

    /// Adds workload D's rows; ratios are taken against the bare `AsyncStream` fan-out at the same subscribers.
    mutating func add(_ outcome: FanoutWorkload.Outcome, plan: BenchmarkPlan) {
        failures += outcome.failures
        for subscribers in plan.fanoutSubscribers {
            let floor = outcome.samples[.bareStreams]?[subscribers].flatMap { Summary($0.map(\.nsPerDelivery)) }
            for source in FanoutWorkload.Source.allCases {
                guard let samples = outcome.samples[source]?[subscribers],
                    let cost = Summary(samples.map(\.nsPerDelivery)),
                    let delivered = Summary(samples.map { Double($0.delivered) })
                else { continue }
                fanout.append(
                    FanoutRow(
                        strategy: source.rawValue, subscribers: subscribers, events: plan.fanoutTransitions,
                        deliveries: Int(delivered.median), nsPerDelivery: rounded(cost.median, 1),
                        nsPerDeliveryMin: rounded(cost.min, 1), nsPerDeliveryMax: rounded(cost.max, 1),
                        ratioToAsyncStream: floor.map { rounded(cost.median / max($0.median, 1e-9), 2) },
                        rssBytesPerSubscriber: Summary(samples.compactMap(\.residentBytesPerSubscriber)).map {
                            rounded($0.median, 0)
                        },
                        rssGrowthBytesDuringTransitions: Summary(
                            samples.compactMap { $0.residentGrowthDuringTransitions.map(Double.init) }
                        ).map { rounded($0.median, 0) }))
                let expected = subscribers * plan.fanoutTransitions
                if let fewest = samples.map(\.delivered).min(), fewest < expected {
                    failures.append(
                        "fan-out: \(source.rawValue) delivered \(fewest) of \(expected) events to "
                            + "\(subscribers) subscribers (subscribers missed events)")
                }
            }
        }
    }
}

extension FanoutWorkload.Sample {
    var nsPerDelivery: Double { elapsed.inNanoseconds / Double(max(delivered, 1)) }
}
