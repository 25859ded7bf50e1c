import UserSessions

/// Workload D: many subscribers to one controller's events while it goes through open/close transitions.
/// Reports nanoseconds per delivered event (driving the transitions until every subscriber has drained its
/// stream, divided by the events delivered) and resident memory per subscriber.
struct FanoutWorkload {
    let plan: BenchmarkPlan

    struct Sample {
        var delivered: Int
        var elapsed: Duration
        var residentBytesPerSubscriber: Double?
        var residentGrowthDuringTransitions: Int?
    }

    struct Outcome {
        var samples: [Sample] = []
        var failures: [String] = []
    }

    func run() async -> Outcome {
        var outcome = Outcome()
        let subscribers = plan.fanoutSubscribers
        let transitions = plan.fanoutTransitions
        for repetition in 1...plan.repetitions {
            do {
                let sample = try await withDeadline(plan.runLimit * 2) {
                    try await Self.runOnce(subscribers: subscribers, transitions: transitions)
                }
                outcome.samples.append(sample)
                Progress.note(
                    "fan-out    \(subscribers) subscribers #\(repetition): \(sample.delivered) deliveries, "
                        + "\(Format.number(sample.elapsed.inNanoseconds / 1e6, places: 1)) ms")
            } catch {
                outcome.failures.append("fan-out: \(subscribers) subscribers: \(error)")
                break
            }
        }
        return outcome
    }

    static func runOnce(subscribers: Int, transitions: Int) async throws -> Sample {
        // Room for every event: a subscriber may lag behind, none has to drop anything.
        let bufferSize = transitions + 16
        let controller = UserSessionController(
            store: InMemoryTokenStore(), configuration: .init(eventBufferSize: bufferSize))
        let prototype = UserSessionPrototype(
            userInfo: UserInfo(id: "bench"),
            credentials: Credentials(accessToken: "token-0", refreshToken: "bench-refresh-token"))
        let subscribed = ArrivalLatch(expected: subscribers)

        ResidentMemory.releaseFreeMemory()
        let residentBefore = ResidentMemory.bytes()
        return try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<subscribers {
                group.addTask {
                    var delivered = 0
                    var first = true
                    for await event in controller.events(bufferSize: bufferSize) {
                        if first {
                            first = false
                            subscribed.arrive()
                            if case .current = event.kind { continue }
                        }
                        delivered += 1
                    }
                    return delivered
                }
            }
            await subscribed.wait()
            let residentSubscribed = ResidentMemory.bytes()
            let clock = ContinuousClock()
            let start = clock.now
            for transition in 0..<transitions {
                if transition.isMultiple(of: 2) {
                    _ = try await controller.open(prototype)
                } else {
                    await controller.close()
                }
            }
            let residentAfterTransitions = ResidentMemory.bytes()
            // Shutting down finishes every stream, so every subscriber's loop ends once it has drained.
            await controller.shutdown()
            var delivered = 0
            for try await count in group { delivered += count }
            let elapsed = clock.now - start

            var perSubscriber: Double?
            if let residentBefore, let residentSubscribed {
                perSubscriber = Double(residentSubscribed - residentBefore) / Double(subscribers)
            }
            var growth: Int?
            if let residentSubscribed, let residentAfterTransitions {
                growth = residentAfterTransitions - residentSubscribed
            }
            return Sample(
                delivered: delivered, elapsed: elapsed, residentBytesPerSubscriber: perSubscriber,
                residentGrowthDuringTransitions: growth)
        }
    }
}
