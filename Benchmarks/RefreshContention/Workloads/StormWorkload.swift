/// Workload C: tokens live a few milliseconds on the real clock while many tasks call in a loop. Reports
/// expiries (distinct tokens that had to be refreshed), refreshes (refresher calls) and calls per second.
struct StormWorkload {
    let plan: BenchmarkPlan

    struct Sample {
        var expiries: Int
        var refreshes: Int
        var calls: Int
        var failedCalls: Int
        var elapsed: Duration
    }

    struct Outcome {
        var samples: [Strategy: [Sample]] = [:]
        var failures: [String] = []
    }

    /// The progress weight of the whole workload: one unit per run (every run lasts the storm's duration).
    static func weight(_ plan: BenchmarkPlan) -> Double {
        Double(plan.repetitions * Strategy.refreshing.count)
    }

    func run(progress: ProgressLine) async -> Outcome {
        var outcome = Outcome()
        var broken: Set<Strategy> = []
        let limit = plan.runLimit + plan.stormDuration
        for repetition in 1...plan.repetitions {
            for strategy in Strategy.refreshing where !broken.contains(strategy) {
                let plan = plan
                do {
                    let sample = try await withDeadline(limit) { try await Self.runOnce(strategy, plan: plan) }
                    outcome.samples[strategy, default: []].append(sample)
                } catch {
                    broken.insert(strategy)
                    outcome.failures.append("storm: \(strategy.rawValue): \(error)")
                }
                progress.advance(by: 1, detail: "\(strategy.rawValue) #\(repetition)")
            }
        }
        return outcome
    }

    static func runOnce(_ strategy: Strategy, plan: BenchmarkPlan) async throws -> Sample {
        let clock = BenchClock.system
        let lifetime = plan.stormTokenLifetime.inSeconds
        let refresher = SimulatedRefresher(latency: plan.stormLatency, tokenLifetime: lifetime, clock: clock)
        let prepared = try await strategy.prepare(
            Scenario(
                clock: clock, refresher: refresher, initialToken: "token-0",
                initialExpiresAt: clock.seconds() + lifetime, refreshWindows: (.zero, .zero)))
        let source = prepared.source
        let tasks = plan.stormTasks
        let gate = StartGate(expected: tasks)
        let stop = StopFlag()

        let (calls, failed, elapsed) = await withTaskGroup(of: (Int, Int).self) { group in
            for _ in 0..<tasks {
                group.addTask {
                    await gate.arriveAndWait()
                    var calls = 0
                    var failed = 0
                    while !stop.isRaised {
                        do {
                            _ = try await source.token()
                            calls += 1
                        } catch {
                            failed += 1
                        }
                    }
                    return (calls, failed)
                }
            }
            await gate.waitForArrivals()
            let clock = ContinuousClock()
            let start = clock.now
            gate.open()
            // When a strategy's calls never suspend, the looping tasks occupy every thread of the cooperative
            // pool and a `Task.sleep` here would never wake up: the stop comes from ``TimerQueue``.
            TimerQueue.after(plan.stormDuration) { stop.raise() }
            var calls = 0
            var failed = 0
            for await (taskCalls, taskFailures) in group {
                calls += taskCalls
                failed += taskFailures
            }
            return (calls, failed, clock.now - start)
        }
        await prepared.tearDown()
        return Sample(
            expiries: refresher.distinctRefreshedTokens, refreshes: refresher.callCount, calls: calls,
            failedCalls: failed, elapsed: elapsed)
    }
}
