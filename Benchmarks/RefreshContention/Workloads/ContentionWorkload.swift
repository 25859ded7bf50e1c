import Synchronization

/// Workload B: N callers, released together, all find the same token expired. Reports the refresher calls for
/// that one expiry, wall time, coordination overhead per waiter and resident-memory growth per waiter.
///
/// The refresher holds its refresh until every caller has made its call (``ArrivalLatch``), then sleeps its
/// latency: all N callers contend for the one expiry, none of them arrives after the new token is in place.
struct ContentionWorkload {
    let plan: BenchmarkPlan

    struct Sample {
        var refreshes: Int
        var wall: Duration
        /// How long the refresh slept; zero when no refresh happened (nothing to subtract from the wall time).
        var refresherLatency: Duration
        var residentGrowthBytes: Int?
        var staleResults: Int
        var failedCalls: Int
    }

    struct Outcome {
        var samples: [Strategy: [Int: [Sample]]] = [:]
        var failures: [String] = []
    }

    /// The progress weight of the whole workload: one unit per waiter and run.
    static func weight(_ plan: BenchmarkPlan) -> Double {
        var units = 0.0
        for waiters in plan.contentionWaiters {
            for strategy in Strategy.refreshing {
                if let maximum = plan.contentionMaximumWaiters[strategy], waiters > maximum { continue }
                units += Double(waiters * plan.repetitions)
            }
        }
        return units
    }

    func run(progress: ProgressLine) async -> Outcome {
        var outcome = Outcome()
        var broken: Set<Strategy> = []
        for waiters in plan.contentionWaiters {
            for repetition in 1...plan.repetitions {
                for strategy in Strategy.refreshing where !broken.contains(strategy) {
                    if let maximum = plan.contentionMaximumWaiters[strategy], waiters > maximum { continue }
                    let latency = plan.contentionLatency
                    do {
                        let sample = try await withDeadline(plan.runLimit) {
                            try await Self.runOnce(strategy, waiters: waiters, latency: latency)
                        }
                        outcome.samples[strategy, default: [:]][waiters, default: []].append(sample)
                    } catch {
                        broken.insert(strategy)
                        outcome.failures.append("contention: \(strategy.rawValue) N=\(waiters): \(error)")
                    }
                    progress.advance(
                        by: Double(waiters), detail: "\(strategy.rawValue) N=\(Format.integer(waiters)) #\(repetition)")
                }
            }
        }
        return outcome
    }

    static func runOnce(_ strategy: Strategy, waiters: Int, latency: Duration) async throws -> Sample {
        let time = ManualTime(seconds: 800_000_000)
        let clock = BenchClock.manual(time)
        let entered = ArrivalLatch(expected: waiters)
        let refresher = SimulatedRefresher(
            latency: latency, tokenLifetime: 86_400, clock: clock, hold: entered, samplesMemory: true)
        let initialToken = "token-0"
        let prepared = try await strategy.prepare(
            Scenario(
                clock: clock, refresher: refresher, initialToken: initialToken,
                initialExpiresAt: time.seconds() + 3_600, refreshWindows: (.zero, .zero)))
        let source = prepared.source
        let gate = StartGate(expected: waiters)

        let tally = CallTally()
        let wallClock = ContinuousClock()
        let (start, residentBefore) = await withDiscardingTaskGroup { group in
            for _ in 0..<waiters {
                group.addTask {
                    await gate.arriveAndWait()
                    entered.arrive()
                    do {
                        if try await source.token() == initialToken { tally.stale.add(1, ordering: .relaxed) }
                    } catch {
                        tally.failed.add(1, ordering: .relaxed)
                    }
                }
            }
            await gate.waitForArrivals()
            ResidentMemory.releaseFreeMemory()
            let residentBefore = ResidentMemory.bytes()
            time.advance(by: 7_200)
            let start = wallClock.now
            gate.open()
            return (start, residentBefore)
        }
        let wall = wallClock.now - start
        let staleCount = tally.stale.load(ordering: .relaxed)
        let failedCount = tally.failed.load(ordering: .relaxed)
        await prepared.tearDown()

        var growth: Int?
        if let before = residentBefore, let during = refresher.residentBytesDuringFirstRefresh {
            growth = during - before
        }
        return Sample(
            refreshes: refresher.callCount, wall: wall, refresherLatency: refresher.measuredLatency ?? .zero,
            residentGrowthBytes: growth, staleResults: staleCount, failedCalls: failedCount)
    }

    /// Counts callers that got the expired token back, and callers whose call threw.
    private final class CallTally: Sendable {
        let stale = Atomic<Int>(0)
        let failed = Atomic<Int>(0)
    }
}
