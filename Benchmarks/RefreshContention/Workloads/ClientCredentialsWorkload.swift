import Foundation
import Synchronization
import UserSessions

/// Workload I, the client-credentials stampede: N callers released together at the moment the server's own token
/// for one key (a scope set) expires. Reports the token requests for that one expiry and the time per caller, for
/// ``ClientCredentialsTokenManager`` beside what a server author writes instead: an actor caching a `Task` per key
/// (the idiom), and a cache without single flight (every caller that finds the token expired asks).
///
/// Every strategy asks one simulated token endpoint that holds its answer until all N callers have made their call,
/// then sleeps its latency: all N callers contend for the one expiry. All three send the same request the same way:
/// a form-encoded client-credentials POST with basic authentication through the endpoint as an ``HTTPTransport``,
/// whose JSON token response they decode (the manager with its own request path, the baselines with
/// ``SimulatedTokenEndpoint/fetch(scopes:)``, what a server author writes). No strategy is spared the request's cost.
struct ClientCredentialsWorkload {
    let plan: BenchmarkPlan

    /// The strategies, by the names in the tables and the JSON.
    enum Contender: String, CaseIterable, Sendable {
        case manager = "ClientCredentialsTokenManager"
        case taskPerKey = "ActorCachedTask per key"
        case naiveCache = "Cache without single flight"

        /// Whether it promises one request per expiry (a second one breaks the benchmark).
        var coalesces: Bool { self != .naiveCache }
    }

    struct Sample {
        var requests: Int
        var wall: Duration
        var latency: Duration
        var failedCalls: Int
        var staleResults: Int
    }

    struct Outcome {
        var samples: [Contender: [Int: [Sample]]] = [:]
        var failures: [String] = []
    }

    static func weight(_ plan: BenchmarkPlan) -> Double {
        var units = 0.0
        for callers in plan.clientCredentialsCallers {
            for contender in Contender.allCases {
                if let maximum = plan.clientCredentialsMaximumCallers[contender.rawValue], callers > maximum {
                    continue
                }
                units += Double(callers * plan.repetitions)
            }
        }
        return units
    }

    func run(progress: ProgressLine) async -> Outcome {
        var outcome = Outcome()
        var broken: Set<Contender> = []
        for callers in plan.clientCredentialsCallers {
            for repetition in 1...plan.repetitions {
                for contender in Contender.allCases where !broken.contains(contender) {
                    if let maximum = plan.clientCredentialsMaximumCallers[contender.rawValue], callers > maximum {
                        continue
                    }
                    let latency = plan.contentionLatency
                    do {
                        let sample = try await withDeadline(plan.runLimit) {
                            try await Self.runOnce(contender, callers: callers, latency: latency)
                        }
                        outcome.samples[contender, default: [:]][callers, default: []].append(sample)
                    } catch {
                        broken.insert(contender)
                        outcome.failures.append("client credentials: \(contender.rawValue) N=\(callers): \(error)")
                    }
                    progress.advance(
                        by: Double(callers),
                        detail: "\(contender.rawValue) N=\(Format.integer(callers)) #\(repetition)")
                }
            }
        }
        return outcome
    }

    static let scopes: Set<String> = ["orders.read"]

    static func runOnce(_ contender: Contender, callers: Int, latency: Duration) async throws -> Sample {
        let time = ManualTime(seconds: 800_000_000)
        let endpoint = SimulatedTokenEndpoint(latency: latency, clock: time)
        let source = try makeSource(contender, endpoint: endpoint, time: time)
        // A first token, then the expiry: every caller below finds it expired.
        let initialToken = try await source.token()
        let entered = ArrivalLatch(expected: callers)
        endpoint.startCounting(holdingUntil: entered)
        time.advance(by: 7_200)
        let gate = StartGate(expected: callers)
        let tally = Tally()
        let wallClock = ContinuousClock()
        let start = await withDiscardingTaskGroup { group in
            for _ in 0..<callers {
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
            let start = wallClock.now
            gate.open()
            return start
        }
        let wall = wallClock.now - start
        return Sample(
            requests: endpoint.requests, wall: wall, latency: endpoint.measuredLatency ?? .zero,
            failedCalls: tally.failed.load(ordering: .relaxed), staleResults: tally.stale.load(ordering: .relaxed))
    }

    /// Callers that got the expired token back, and callers whose call threw.
    private final class Tally: Sendable {
        let stale = Atomic<Int>(0)
        let failed = Atomic<Int>(0)
    }

    static func makeSource(_ contender: Contender, endpoint: SimulatedTokenEndpoint, time: ManualTime) throws
        -> any ClientTokenSource
    {
        switch contender {
        case .manager:
            guard let tokenEndpoint = URL(string: "https://id.example.test/token") else {
                throw BenchmarkError("bad token endpoint")
            }
            let tokens = try ClientCredentialsTokenManager(
                tokenEndpoint: tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "bench", secret: "bench-secret"),
                configuration: .init(clock: .custom { time.date() }), transport: endpoint)
            return ManagerSource(tokens: tokens, key: .init(scopes: scopes))
        case .taskPerKey:
            return TaskPerKeyCache(CacheTarget(endpoint: endpoint, time: time, scopes: scopes))
        case .naiveCache:
            return CacheWithoutSingleFlight(CacheTarget(endpoint: endpoint, time: time, scopes: scopes))
        }
    }
}

/// "Give me the token for the workload's key".
protocol ClientTokenSource: Sendable {
    nonisolated(nonsending) func token() async throws -> String
}

struct ManagerSource: ClientTokenSource {
    let tokens: ClientCredentialsTokenManager
    let key: ClientCredentialsTokenManager.Key

    nonisolated(nonsending) func token() async throws -> String {
        try await tokens.accessToken(for: key)
    }
}

/// What a baseline cache asks and for which key: the endpoint, the time that judges expiry, the scopes.
struct CacheTarget: Sendable {
    let endpoint: SimulatedTokenEndpoint
    let time: ManualTime
    let scopes: Set<String>
}

/// The idiom: an actor with a dictionary of tokens per key and one of in-flight `Task`s per key, which followers
/// await.
actor TaskPerKeyCache: ClientTokenSource {
    private var tokens: [Set<String>: SimulatedTokenEndpoint.Issued] = [:]
    private var inFlight: [Set<String>: Task<SimulatedTokenEndpoint.Issued, any Error>] = [:]
    private let target: CacheTarget

    init(_ target: CacheTarget) {
        self.target = target
    }

    func token() async throws -> String {
        let scopes = target.scopes
        if let cached = tokens[scopes], target.time.seconds() < cached.expiresAt { return cached.token }
        if let task = inFlight[scopes] { return try await task.value.token }
        let endpoint = target.endpoint
        let task = Task { try await endpoint.fetch(scopes: scopes) }
        inFlight[scopes] = task
        do {
            let issued = try await task.value
            tokens[scopes] = issued
            inFlight[scopes] = nil
            return issued.token
        } catch {
            inFlight[scopes] = nil
            throw error
        }
    }
}

/// A cache without single flight: a locked dictionary; every caller that finds the token expired requests one.
final class CacheWithoutSingleFlight: ClientTokenSource {
    private let tokens = Mutex<[Set<String>: SimulatedTokenEndpoint.Issued]>([:])
    private let target: CacheTarget

    init(_ target: CacheTarget) {
        self.target = target
    }

    nonisolated(nonsending) func token() async throws -> String {
        let (scopes, now) = (target.scopes, target.time.seconds())
        if let cached = tokens.withLock({ $0[scopes] }), now < cached.expiresAt { return cached.token }
        let issued = try await target.endpoint.fetch(scopes: scopes)
        tokens.withLock { $0[scopes] = issued }
        return issued.token
    }
}

/// The simulated token endpoint: counts requests (once counting started), holds them until every caller has made
/// its call, sleeps its latency, issues a new token valid for an hour. As an ``HTTPTransport`` it answers the
/// manager's requests with a JSON token response.
final class SimulatedTokenEndpoint: HTTPTransport {
    struct Issued: Sendable {
        var token: String
        var expiresAt: Double
    }

    let latency: Duration
    let clock: ManualTime
    private let issued = Atomic<Int>(0)
    private let counted = Atomic<Int>(0)
    private let state = Mutex<(hold: ArrivalLatch?, counting: Bool, latency: Duration?)>((nil, false, nil))

    init(latency: Duration, clock: ManualTime) {
        self.latency = latency
        self.clock = clock
    }

    /// Requests from now on are counted and wait for `hold` to open.
    func startCounting(holdingUntil hold: ArrivalLatch) {
        state.withLock { $0 = (hold, true, nil) }
    }

    var requests: Int { counted.load(ordering: .acquiring) }
    var measuredLatency: Duration? { state.withLock { $0.latency } }

    func request(scopes: Set<String>) async throws -> Issued {
        let (hold, counting) = state.withLock { ($0.hold, $0.counting) }
        if counting { counted.add(1, ordering: .relaxed) }
        if let hold { await hold.wait() }
        let start = ContinuousClock.now
        if latency > .zero { try await Task.sleep(for: latency) }
        let slept = ContinuousClock.now - start
        if counting { state.withLock { $0.latency = $0.latency ?? slept } }
        let number = issued.wrappingAdd(1, ordering: .relaxed).newValue
        return Issued(token: "cc-\(number)", expiresAt: clock.seconds() + 3_600)
    }

    func send(_ request: HTTPTransportRequest) async throws -> HTTPTransportResponse {
        let issued = try await self.request(scopes: [])
        let body = #"{"access_token":"\#(issued.token)","token_type":"Bearer","expires_in":3600}"#
        return HTTPTransportResponse(statusCode: 200, body: Data(body.utf8))
    }

    /// What a baseline does to get a token: a client-credentials POST with basic authentication through this
    /// endpoint as a transport, and the JSON token response decoded; the expiry is its `expires_in` from now.
    func fetch(scopes: Set<String>) async throws -> Issued {
        guard let url = URL(string: "https://id.example.test/token") else { throw BenchmarkError("bad token endpoint") }
        let form = "grant_type=client_credentials&scope=" + scopes.sorted().joined(separator: "%20")
        let request = HTTPTransportRequest(
            method: .post, url: url,
            headers: [
                ("Authorization", "Basic " + Data("bench:bench-secret".utf8).base64EncodedString()),
                ("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json"),
            ],
            body: Data(form.utf8), timeout: .seconds(30), maximumResponseBytes: 1 << 20)
        let response = try await send(request)
        guard response.statusCode == 200 else { throw BenchmarkError("token endpoint answered \(response.statusCode)") }
        let decoded = try JSONDecoder().decode(TokenResponse.self, from: response.body)
        return Issued(token: decoded.accessToken, expiresAt: clock.seconds() + Double(decoded.expiresIn))
    }

    private struct TokenResponse: Decodable {
        let accessToken: String
        let expiresIn: Int

        enum CodingKeys: String, CodingKey {
            case accessToken = "access_token"
            case expiresIn = "expires_in"
        }
    }
}
