import Foundation
import Synchronization
import UserSessions

/// One process of the fleet workload: `RefreshContention --fleet-node STORE IDENTIFIER TOKEN-ENDPOINT TASKS
/// START-EPOCH SECONDS`, started by ``FleetWorkload`` from this same executable.
///
/// Restores the user from the shared store, waits until START-EPOCH (seconds since 1970, so that every node starts
/// together), then runs TASKS tasks that call `accessToken()` in a loop for SECONDS, 2 ms apart. Prints one
/// ``FleetNodeSummary`` as JSON on standard output. Tokens never leave the process: only short hashes of them.
enum FleetNode {
    static let flag = "--fleet-node"

    static func main(arguments: [String]) async -> Int32 {
        guard arguments.count == 6, let tasks = Int(arguments[3]), let startEpoch = Double(arguments[4]),
            let seconds = Double(arguments[5]), let endpoint = URL(string: arguments[2])
        else {
            Progress.note("\(flag) STORE IDENTIFIER TOKEN-ENDPOINT TASKS START-EPOCH SECONDS")
            return 64
        }
        do {
            let summary = try await FleetStore.with(arguments[0]) { store in
                try await run(
                    store: store, identifier: arguments[1], endpoint: endpoint, tasks: tasks,
                    start: Date(timeIntervalSince1970: startEpoch), seconds: seconds)
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            print(String(decoding: try encoder.encode(summary), as: UTF8.self))
            return 0
        } catch {
            Progress.note("fleet node: \(error)")
            return 2
        }
    }

    /// The controller's settings for 200-ms tokens: refresh in the background in the last 50 ms, make callers wait
    /// in the last 20 ms, and a breaker that a token every 150 ms never trips.
    static var configuration: UserSessionController.Configuration {
        var configuration = UserSessionController.Configuration()
        configuration.persistsCurrentIdentifier = false
        configuration.refreshLeadTime = .milliseconds(20)
        configuration.proactiveRefreshWindow = .milliseconds(50)
        configuration.refreshLoopPolicy = .init(maximumRefreshes: 1_000_000, window: .seconds(1))
        return configuration
    }

    static func run(
        store: any CoordinatedTokenStore, identifier: String, endpoint: URL, tasks: Int, start: Date, seconds: Double
    ) async throws -> FleetNodeSummary {
        let refresher = try OAuth2TokenRefresher(
            tokenEndpoint: endpoint, clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"),
            requestTimeout: .seconds(10))
        let timings = RefreshTimings()
        var settings = configuration
        settings.observers = [timings]
        let controller = UserSessionController(store: store, refresher: refresher, configuration: settings)
        guard try await controller.restore(identifier: identifier) != nil else {
            throw BenchmarkError("node: nothing to restore for the fleet's user")
        }
        let wait = start.timeIntervalSinceNow
        if wait > 0 { try await Task.sleep(for: .seconds(wait)) }
        let clock = ContinuousClock()
        let stop = clock.now + .seconds(seconds)
        let perTask = await withTaskGroup(of: TaskTally.self) { group in
            for _ in 0..<tasks {
                group.addTask {
                    var tally = TaskTally()
                    while clock.now < stop {
                        let began = clock.now
                        do {
                            let token = try await controller.accessToken()
                            tally.latencies.append((clock.now - began).inSeconds * 1e3)
                            tally.tokens.insert(FleetToken.hash(token))
                        } catch {
                            tally.errors += 1
                            tally.lastError = "\(error)"
                        }
                        try? await Task.sleep(for: .milliseconds(2))
                    }
                    return tally
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        // A background refresh may still be on its way to the store: let it land before closing, so that every
        // refresh the server counted is also a token in the store.
        let settle = clock.now + .seconds(5)
        while timings.inFlight, clock.now < settle { try? await Task.sleep(for: .milliseconds(5)) }
        await controller.close()
        await controller.shutdown()
        var latencies = perTask.flatMap(\.latencies)
        latencies.sort()
        let recorded = timings.snapshot
        return FleetNodeSummary(
            calls: latencies.count, errors: perTask.map(\.errors).reduce(0, +),
            lastError: perTask.compactMap(\.lastError).first, refreshes: recorded.refreshed,
            adopted: recorded.adopted, refreshMilliseconds: recorded.refreshDurations,
            adoptMilliseconds: recorded.adoptDurations,
            callP50Milliseconds: Percentile.of(latencies, 0.50), callP99Milliseconds: Percentile.of(latencies, 0.99),
            callMaxMilliseconds: latencies.last ?? 0,
            tokens: Set(perTask.flatMap(\.tokens)).sorted())
    }

    struct TaskTally: Sendable {
        var latencies: [Double] = []
        var tokens: Set<String> = []
        var errors = 0
        var lastError: String?
    }
}

/// What one node saw; the parent reads it from the node's standard output.
struct FleetNodeSummary: Codable, Sendable {
    var calls: Int
    var errors: Int
    var lastError: String?
    /// Refreshes this node made itself (`.credentialsRefreshed`).
    var refreshes: Int
    /// Rotations this node took from the store instead (`.credentialsUpdated` adopted from the store).
    var adopted: Int
    /// Each refresh flight of this node that refreshed, from `.refreshStarted` until `.credentialsRefreshed`, in
    /// milliseconds.
    var refreshMilliseconds: [Double]
    /// Each refresh flight of this node that adopted another node's rotation instead, until the adoption.
    var adoptMilliseconds: [Double]
    var callP50Milliseconds: Double
    var callP99Milliseconds: Double
    var callMaxMilliseconds: Double
    /// Short hashes of the distinct access tokens the node's callers got.
    var tokens: [String]
}

/// Short hashes of tokens (FNV-1a, 64 bits): equal tokens hash equal, and a hash does not give the token back.
enum FleetToken {
    static func hash(_ token: String) -> String {
        StableHash64(token).hexDigits
    }
}

enum Percentile {
    /// The value at `fraction` of the sorted `values` (nearest rank); 0 when empty.
    static func of(_ values: [Double], _ fraction: Double) -> Double {
        guard !values.isEmpty else { return 0 }
        let rank = Int((fraction * Double(values.count)).rounded(.up)) - 1
        return values[min(max(rank, 0), values.count - 1)]
    }
}

/// Times every refresh flight of one controller from its events: `.refreshStarted` until `.credentialsRefreshed`
/// (this node refreshed), `.credentialsUpdated` adopted from the store (another node had), or `.refreshFailed`.
final class RefreshTimings: UserSessionObserver {
    struct State {
        var started: ContinuousClock.Instant?
        var refreshDurations: [Double] = []
        var adoptDurations: [Double] = []
        var refreshed = 0
        var adopted = 0
    }

    private let state = Mutex(State())

    var snapshot: State { state.withLock { $0 } }
    var inFlight: Bool { state.withLock { $0.started != nil } }

    /// With `FLEET_TRACE=1`, every event (its kind only: never a token) goes to standard error, to diagnose a run.
    private static let trace = ProcessInfo.processInfo.environment["FLEET_TRACE"] == "1"

    func observe(_ event: UserSessionEvent, context: UserSessionEventContext) {
        let now = ContinuousClock.now
        if Self.trace {
            let pid = ProcessInfo.processInfo.processIdentifier
            Progress.note("fleet node \(pid) \(Date().timeIntervalSince1970): \(event.kind)")
        }
        state.withLock { state in
            switch event.kind {
            case .refreshStarted:
                state.started = now
            case .credentialsRefreshed:
                state.refreshed += 1
                if let duration = state.finish(at: now) { state.refreshDurations.append(duration) }
            case .credentialsUpdated(let change) where change.adoptedFromStore:
                state.adopted += 1
                if let duration = state.finish(at: now) { state.adoptDurations.append(duration) }
            case .refreshFailed:
                state.started = nil
            default:
                break
            }
        }
    }
}

extension RefreshTimings.State {
    /// Ends the flight in progress, if any, and returns how long it took in milliseconds.
    fileprivate mutating func finish(at now: ContinuousClock.Instant) -> Double? {
        guard let started else { return nil }
        self.started = nil
        return (now - started).inSeconds * 1e3
    }
}
