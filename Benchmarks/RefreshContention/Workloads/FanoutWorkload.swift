import Synchronization
import UserSessions

/// Workload D: many subscribers to one controller's events while it goes through open/close transitions.
/// Reports nanoseconds per delivered event (driving the transitions until every subscriber has drained its
/// stream, divided by the events delivered) and resident memory per subscriber.
///
/// The floor is the same fan-out without the library: one `AsyncStream` per subscriber with the same buffering
/// policy (`.bufferingNewest`, same size), read by the same consumer loop, fed by a loop that yields one prebuilt
/// event to every continuation per transition. After each transition its producer yields the thread
/// (`Task.yield()`), as the controller's `open` and `close` suspend on their way: the benchmark's task then waits
/// behind the consumers it woke, and every event reaches a suspended consumer, as with the controller. A
/// second, tight-loop variant
/// never suspends between transitions: its consumers find many events at each wake-up and drain them in a batch,
/// which a producer of lifecycle events (that awaits between transitions) never allows; it is shown for
/// reference, the target is taken against the first.
struct FanoutWorkload {
    let plan: BenchmarkPlan

    /// Who produces the events.
    enum Source: String, CaseIterable, Sendable {
        case controller = "UserSessionController"
        case bareStreams = "AsyncStream fan-out"
        case bareStreamsTightLoop = "AsyncStream fan-out, tight loop"
    }

    struct Sample {
        var delivered: Int
        var elapsed: Duration
        var residentBytesPerSubscriber: Double?
        var residentGrowthDuringTransitions: Int?
    }

    struct Outcome {
        var samples: [Source: [Int: [Sample]]] = [:]
        var failures: [String] = []
    }

    func run(progress: ProgressLine) async -> Outcome {
        var outcome = Outcome()
        let transitions = plan.fanoutTransitions
        var broken: Set<Source> = []
        for subscribers in plan.fanoutSubscribers {
            for repetition in 1...plan.repetitions {
                // The two sources take turns, so that machine noise spreads over both.
                for source in Source.allCases where !broken.contains(source) {
                    do {
                        let sample = try await withDeadline(plan.runLimit * 2) {
                            try await Self.runOnce(source, subscribers: subscribers, transitions: transitions)
                        }
                        outcome.samples[source, default: [:]][subscribers, default: []].append(sample)
                    } catch {
                        broken.insert(source)
                        outcome.failures.append("fan-out: \(source.rawValue) \(subscribers) subscribers: \(error)")
                    }
                    progress.advance(
                        by: Double(subscribers), detail: "\(source.rawValue) \(subscribers) subscribers #\(repetition)")
                }
            }
        }
        return outcome
    }

    /// The progress weight of the whole workload: one unit per subscriber and run.
    static func weight(_ plan: BenchmarkPlan) -> Double {
        Double(plan.fanoutSubscribers.reduce(0, +) * plan.repetitions * Source.allCases.count)
    }

    static func runOnce(_ source: Source, subscribers: Int, transitions: Int) async throws -> Sample {
        // Room for every event: a subscriber may lag behind, none has to drop anything.
        let bufferSize = transitions + 16
        let producer: any FanoutProducer =
            switch source {
            case .controller: ControllerProducer(bufferSize: bufferSize)
            case .bareStreams: PacedStreamProducer(streams: BareStreamProducer(bufferSize: bufferSize))
            case .bareStreamsTightLoop: BareStreamProducer(bufferSize: bufferSize)
            }
        let subscribed = ArrivalLatch(expected: subscribers)

        ResidentMemory.releaseFreeMemory()
        let residentBefore = ResidentMemory.bytes()
        let streams = (0..<subscribers).map { _ in producer.subscribe() }
        return try await withThrowingTaskGroup(of: Int.self) { group in
            for stream in streams {
                group.addTask { await Self.consume(stream, subscribed: subscribed) }
            }
            await subscribed.wait()
            let residentSubscribed = ResidentMemory.bytes()
            let clock = ContinuousClock()
            let start = clock.now
            for transition in 0..<transitions {
                try await producer.transition(opening: transition.isMultiple(of: 2))
            }
            let residentAfterTransitions = ResidentMemory.bytes()
            // Finishing ends every stream, so every subscriber's loop ends once it has drained.
            await producer.finish()
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

    /// The one consumer loop both sources are read by: counts events after the initial `.current`.
    private static func consume(_ stream: AsyncStream<UserSessionEvent>, subscribed: ArrivalLatch) async -> Int {
        var delivered = 0
        var first = true
        for await event in stream {
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

/// What drives workload D: subscriptions, one event per transition to every subscriber, and the end.
private protocol FanoutProducer: Sendable {
    func subscribe() -> AsyncStream<UserSessionEvent>
    func transition(opening: Bool) async throws
    func finish() async
}

/// The library: `UserSessionController.events(bufferSize:)`, driven by `open` and `close`.
private struct ControllerProducer: FanoutProducer {
    let bufferSize: Int
    let controller: UserSessionController
    let prototype = UserSessionPrototype(
        userInfo: UserInfo(id: "bench"),
        credentials: Credentials(accessToken: "token-0", refreshToken: "bench-refresh-token"))

    init(bufferSize: Int) {
        self.bufferSize = bufferSize
        controller = UserSessionController(
            store: InMemoryTokenStore(), configuration: .init(eventBufferSize: bufferSize))
    }

    func subscribe() -> AsyncStream<UserSessionEvent> { controller.events(bufferSize: bufferSize) }

    func transition(opening: Bool) async throws {
        if opening {
            _ = try await controller.open(prototype)
        } else {
            await controller.close()
        }
    }

    func finish() async { await controller.shutdown() }
}

/// The floor: one `AsyncStream` per subscriber, `.bufferingNewest(bufferSize)`, and a loop that yields one event
/// to every continuation per transition. No ordering guarantee across subscribers, no `.current` bookkeeping
/// beyond yielding it first, no removal of terminated subscribers.
private final class BareStreamProducer: FanoutProducer {
    let bufferSize: Int
    private let continuations = Mutex<[AsyncStream<UserSessionEvent>.Continuation]>([])
    private let sequence = Atomic<UInt64>(0)
    private let opened = UserSession(identifier: "bench", state: .opened, userInfo: UserInfo(id: "bench"))
    private let closed = UserSession(identifier: "bench", state: .closed, userInfo: UserInfo(id: "bench"))

    init(bufferSize: Int) {
        self.bufferSize = bufferSize
    }

    func subscribe() -> AsyncStream<UserSessionEvent> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: UserSessionEvent.self, bufferingPolicy: .bufferingNewest(bufferSize))
        continuation.yield(UserSessionEvent(kind: .current, session: UserSession(), sequence: 0))
        continuations.withLock { $0.append(continuation) }
        return stream
    }

    func transition(opening: Bool) async throws {
        let number = sequence.wrappingAdd(1, ordering: .relaxed).newValue
        let event =
            opening
            ? UserSessionEvent(kind: .opened, session: opened, sequence: number)
            : UserSessionEvent(kind: .closed(.requested), session: closed, sequence: number)
        continuations.withLock { continuations in
            for continuation in continuations { continuation.yield(event) }
        }
    }

    func finish() async {
        let all = continuations.withLock { continuations in
            defer { continuations.removeAll() }
            return continuations
        }
        for continuation in all { continuation.finish() }
    }
}

/// A ``BareStreamProducer`` that yields the thread after each transition, so that the consumers it woke run
/// before the next transition, as they do between the controller's transitions.
private struct PacedStreamProducer: FanoutProducer {
    let streams: BareStreamProducer

    func subscribe() -> AsyncStream<UserSessionEvent> { streams.subscribe() }

    func transition(opening: Bool) async throws {
        try await streams.transition(opening: opening)
        await Task.yield()
    }

    func finish() async { await streams.finish() }
}
