/// Workload A: the token is fresh; T tasks call as fast as they can. Reports aggregate nanoseconds per call.
struct HotPathWorkload {
    let plan: BenchmarkPlan

    struct Outcome {
        var samples: [Strategy: [Int: [Double]]] = [:]
        var failures: [String] = []
    }

    /// The progress weight of the whole workload: one unit per measured configuration.
    static func weight(_ plan: BenchmarkPlan) -> Double {
        Double(plan.hotPathTasks.count * plan.repetitions * Strategy.hotPath.count)
    }

    func run(progress: ProgressLine) async -> Outcome {
        var outcome = Outcome()
        let clock = BenchClock.system
        let refresher = SimulatedRefresher(latency: .zero, tokenLifetime: 86_400, clock: clock)
        let scenario = Scenario(
            clock: clock, refresher: refresher, initialToken: "token-0", initialExpiresAt: clock.seconds() + 86_400,
            refreshWindows: nil)
        var prepared: [(Strategy, PreparedSource)] = []
        for strategy in Strategy.hotPath {
            do {
                let source = try await withDeadline(plan.runLimit) { try await strategy.prepare(scenario) }
                // Warm up caches, the allocator and the thread pool before measuring.
                _ = try await withDeadline(plan.runLimit) {
                    try await Self.measure(source.source, tasks: 1, callsPerTask: 10_000)
                }
                prepared.append((strategy, source))
            } catch {
                outcome.failures.append("hot path: \(strategy.rawValue) could not start: \(error)")
            }
        }

        var broken: Set<Strategy> = []
        for tasks in plan.hotPathTasks {
            let callsPerTask = (plan.hotPathCalls + tasks - 1) / tasks
            for repetition in 1...plan.repetitions {
                // Strategies take turns within each repetition, so that machine noise spreads over all of them.
                for (strategy, source) in prepared where !broken.contains(strategy) {
                    do {
                        let nanoseconds = try await withDeadline(plan.runLimit) {
                            try await Self.measure(source.source, tasks: tasks, callsPerTask: callsPerTask)
                        }
                        outcome.samples[strategy, default: [:]][tasks, default: []].append(nanoseconds)
                    } catch {
                        broken.insert(strategy)
                        outcome.failures.append("hot path: \(strategy.rawValue) T=\(tasks): \(error)")
                    }
                    progress.advance(by: 1, detail: "\(strategy.rawValue) T=\(tasks) #\(repetition)")
                }
            }
        }
        for (strategy, source) in prepared where !broken.contains(strategy) {
            await source.tearDown()
        }
        if refresher.callCount > 0 {
            outcome.failures.append("hot path: the refresher was called \(refresher.callCount) times for a fresh token")
        }
        return outcome
    }

    /// Runs `tasks` tasks released together, each making `callsPerTask` calls; returns wall nanoseconds per call.
    static func measure(_ source: some TokenSource, tasks: Int, callsPerTask: Int) async throws -> Double {
        let gate = StartGate(expected: tasks)
        return try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<tasks {
                group.addTask {
                    await gate.arriveAndWait()
                    var checksum = 0
                    for _ in 0..<callsPerTask {
                        checksum &+= try await source.token().utf8.count
                    }
                    return checksum
                }
            }
            await gate.waitForArrivals()
            let clock = ContinuousClock()
            let start = clock.now
            gate.open()
            var checksum = 0
            for try await partial in group { checksum &+= partial }
            let elapsed = clock.now - start
            // The checksum keeps the optimiser from dropping the calls.
            guard checksum > 0 else { throw BenchmarkError("every token was empty") }
            return elapsed.inNanoseconds / Double(tasks * callsPerTask)
        }
    }
}

/// A benchmark run that could not complete.
struct BenchmarkError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
