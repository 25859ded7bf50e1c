#if AsyncHTTPClient
import AsyncHTTPClient
import Foundation
import Synchronization
import UserSessions
import UserSessionsAsyncHTTPClient
import UserSessionsTestSupport

/// Workload "transport": the HTTP transports side by side, against the local OAuth fixture
/// (`Tests/UserSessionsTests/Fixtures/oauth_server.py`, started here on 127.0.0.1).
///
/// For each transport, N distinct users (each a token family of its own) refresh at once through one shared
/// ``OAuth2TokenRefresher``: N concurrent refresh-token grants, each on its own connection (the fixture closes every
/// connection after one answer). Reports refreshes per second (N / wall time of the burst) and the p50 and p99 of
/// the refreshes' own latencies. The transports take turns, in alternating order across repetitions, against one
/// server, so they share its limits (a python `ThreadingHTTPServer`: it is the likely bottleneck).
///
/// Then the restart storm over each transport: a server restarts with `--storm-users` stored users whose tokens
/// expired while it was down, and `--storm-requests` first requests for them arrive at once (request `i` for user
/// `i % U`) through one ``UserSessionRegistry``, the fixture answering each token request after
/// `--storm-delay-ms` (a provider's latency). Each user must be refreshed exactly once; the report gives the wall
/// time and the most token requests in flight at once, which is what a transport's connection limit caps
/// (`URLSession` opens 6 connections per host unless told otherwise).
///
/// Run it with `swift run -c release --traits AsyncHTTPClient RefreshContention --transport [--quick] [--json]`.
struct TransportWorkload {
    struct Options {
        var users = 1_000
        var repetitions = 3
        var json = false
        var stormUsers = 200
        var stormRequests = 2_000
        var stormDelayMilliseconds = 50

        init(arguments: [String]) throws {
            var remaining = arguments[...]
            while let argument = remaining.popFirst() {
                switch argument {
                case "--quick": repetitions = 1
                case "--json": json = true
                case "--users":
                    guard let value = remaining.popFirst().flatMap({ Int($0) }), value > 0 else {
                        throw TransportCheckFailure(description: "--users needs a positive number")
                    }
                    users = value
                case "--storm-users":
                    stormUsers = try TransportWorkload.positive(remaining.popFirst(), argument)
                case "--storm-requests":
                    stormRequests = try TransportWorkload.positive(remaining.popFirst(), argument)
                case "--storm-delay-ms":
                    stormDelayMilliseconds = try TransportWorkload.positive(remaining.popFirst(), argument)
                default: throw TransportCheckFailure(description: "unknown argument '\(argument)' for --transport")
                }
            }
        }
    }

    fileprivate static func positive(_ text: String?, _ argument: String) throws -> Int {
        guard let value = text.flatMap({ Int($0) }), value > 0 else {
            throw TransportCheckFailure(description: "\(argument) needs a positive number")
        }
        return value
    }

    /// One transport's figures over the repetitions.
    struct Row: Encodable {
        var transport: String
        var users: Int
        var refreshesPerSecond: [Double] = []
        var p50Milliseconds: [Double] = []
        var p99Milliseconds: [Double] = []
        var failures = 0
        var firstFailure: String?
    }

    /// A transport to measure, made fresh for each burst and disposed of afterwards.
    struct Contender {
        var name: String
        var make: @Sendable () -> (transport: any HTTPTransport, shutdown: @Sendable () async throws -> Void)
    }

    static let contenders = [
        Contender(name: "URLSession") { (URLSessionHTTPTransport(), {}) },
        Contender(name: "URLSession (64/host)") { (URLSessionHTTPTransport(maximumConnectionsPerHost: 64), {}) },
        Contender(name: "AsyncHTTPClient") {
            let client = HTTPClient(
                eventLoopGroup: HTTPClient.defaultEventLoopGroup,
                configuration: AsyncHTTPClientTransport.recommendedConfiguration)
            return (AsyncHTTPClientTransport(client: client), { try await client.shutdown() })
        },
    ]

    /// Runs the workload with `arguments` (after `--transport`) and returns the exit status: 0, or 2 when a refresh
    /// failed or the server counted fewer refreshes than were made.
    static func main(arguments: [String]) async -> Int32 {
        do {
            let options = try Options(arguments: arguments)
            let rows = try await run(options)
            let storm = try await runStorms(options)
            if options.json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
                print(String(decoding: try encoder.encode(Report(transport: rows, restartStorm: storm)), as: UTF8.self))
            } else {
                print(render(rows, options))
                print("")
                print(render(storm, options))
            }
            return rows.allSatisfy { $0.failures == 0 } && storm.allSatisfy { $0.failures == 0 } ? 0 : 2
        } catch {
            note("transport: \(error)")
            return 2
        }
    }

    static func run(_ options: Options) async throws -> [Row] {
        let server = try await OAuthFixtureServer.start()
        var rows = contenders.map { Row(transport: $0.name, users: options.users) }
        do {
            for repetition in 0..<options.repetitions {
                let order = repetition.isMultiple(of: 2) ? Array(rows.indices) : rows.indices.reversed()
                for index in order {
                    try await burst(contenders[index], users: options.users, server: server, into: &rows[index])
                    let row = rows[index]
                    note(
                        "transport  \(row.transport) #\(repetition + 1): "
                            + "\(format(row.refreshesPerSecond.last ?? 0, 0)) refreshes/s, "
                            + "p50 \(format(row.p50Milliseconds.last ?? 0, 1)) ms, "
                            + "p99 \(format(row.p99Milliseconds.last ?? 0, 1)) ms, failures \(row.failures)")
                }
            }
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
        return rows
    }

    /// N users refreshing at once through one transport.
    static func burst(_ contender: Contender, users: Int, server: OAuthFixtureServer, into row: inout Row)
        async throws
    {
        let families = try await server.issue(count: users)
        let (transport, shutdown) = contender.make()
        let refresher = try OAuth2TokenRefresher(
            tokenEndpoint: server.tokenEndpoint,
            clientAuthentication: .clientSecretBasic(id: "client", secret: TransportCheck.clientSecret),
            requestTimeout: .seconds(60), transport: transport)
        let refreshesBefore = try await server.stats().refreshes
        let clock = ContinuousClock()
        let start = clock.now
        let results = await withTaskGroup(of: Result<Duration, any Error>.self) { group in
            for family in families {
                group.addTask {
                    let began = clock.now
                    do {
                        _ = try await refresher.refresh(TransportCheck.credentials(family.refreshToken))
                        return .success(clock.now - began)
                    } catch {
                        return .failure(error)
                    }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        let wall = clock.now - start
        try await shutdown()
        var latencies: [Double] = []
        for result in results {
            switch result {
            case .success(let latency): latencies.append(latency.milliseconds)
            case .failure(let error):
                row.failures += 1
                // The transport's own error says more than the refresher's classification.
                let cause = (error as? UserSessionError)?.underlying.map { "\($0)" } ?? "\(error)"
                row.firstFailure = row.firstFailure ?? cause
            }
        }
        let counted = try await server.stats().refreshes - refreshesBefore
        if counted != latencies.count {
            row.failures += 1
            row.firstFailure =
                row.firstFailure ?? "the server counted \(counted) refreshes, the transport made \(latencies.count)"
        }
        latencies.sort()
        row.refreshesPerSecond.append(Double(latencies.count) / max(wall.milliseconds / 1000, 1e-9))
        row.p50Milliseconds.append(percentile(latencies, 0.50))
        row.p99Milliseconds.append(percentile(latencies, 0.99))
    }

    struct Report: Encodable {
        var transport: [Row]
        var restartStorm: [StormRow]
    }

    /// One transport's restart storms over the repetitions.
    struct StormRow: Encodable {
        var transport: String
        var users: Int
        var requests: Int
        var wallMilliseconds: [Double] = []
        /// The most token requests the fixture answered at once, and the most the transport had been handed at once
        /// (the difference waited in the transport for a connection).
        var peakInFlight: [Int] = []
        var queuedInTransport: [Int] = []
        var refreshes: [Int] = []
        var failures = 0
        var firstFailure: String?
    }

    static func runStorms(_ options: Options) async throws -> [StormRow] {
        let server = try await OAuthFixtureServer.start()
        var rows = contenders.map {
            StormRow(transport: $0.name, users: options.stormUsers, requests: options.stormRequests)
        }
        do {
            try await server.configure(["mode": "normal", "delay": Double(options.stormDelayMilliseconds) / 1000])
            for repetition in 0..<options.repetitions {
                let order = repetition.isMultiple(of: 2) ? Array(rows.indices) : rows.indices.reversed()
                for index in order {
                    try await storm(contenders[index], options, server: server, into: &rows[index])
                    let row = rows[index]
                    note(
                        "restart storm  \(row.transport) #\(repetition + 1): "
                            + "\(format(row.wallMilliseconds.last ?? 0, 0)) ms, "
                            + "\(row.peakInFlight.last ?? 0) in flight at most, \(row.refreshes.last ?? 0) refreshes, "
                            + "failures \(row.failures)")
                }
            }
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
        return rows
    }

    /// One restart storm: a fresh registry over a store of users whose tokens expired, every first request at once.
    static func storm(_ contender: Contender, _ options: Options, server: OAuthFixtureServer, into row: inout StormRow)
        async throws
    {
        let families = try await server.issue(count: options.stormUsers)
        let store = InMemoryTokenStore()
        for (user, family) in families.enumerated() {
            try await store.save(
                StoredSession(
                    userInfo: UserInfo(id: "user-\(user)"),
                    credentials: Credentials(
                        accessToken: family.accessToken, refreshToken: family.refreshToken,
                        expiresAt: Date().addingTimeInterval(-600))),
                identifier: "user-\(user)")
        }
        let (inner, shutdown) = contender.make()
        let transport = InFlightCountingTransport(inner)
        let refresher = try OAuth2TokenRefresher(
            tokenEndpoint: server.tokenEndpoint,
            clientAuthentication: .clientSecretBasic(id: "client", secret: TransportCheck.clientSecret),
            requestTimeout: .seconds(60), transport: transport)
        let registry = UserSessionRegistry(store: store, refresher: refresher)
        let refreshesBefore = try await server.stats().refreshes
        try await server.resetPeakInFlight()
        let expired = families.map(\.accessToken)
        let users = options.stormUsers
        let clock = ContinuousClock()
        let start = clock.now
        let failed = await withTaskGroup(of: Bool.self) { group in
            for request in 0..<options.stormRequests {
                group.addTask {
                    let user = request % users
                    guard let controller = try? await registry.session(for: "user-\(user)"),
                        let token = try? await controller.accessToken()
                    else { return false }
                    return token != expired[user]
                }
            }
            return await group.reduce(0) { $0 + ($1 ? 0 : 1) }
        }
        let wall = clock.now - start
        await registry.shutdown()
        try await shutdown()
        let stats = try await server.stats()
        let refreshes = stats.refreshes - refreshesBefore
        if failed > 0 {
            row.failures += failed
            row.firstFailure = row.firstFailure ?? "\(failed) requests got no fresh token"
        }
        if refreshes != min(users, options.stormRequests) {
            row.failures += 1
            row.firstFailure = row.firstFailure ?? "the server counted \(refreshes) refreshes for \(users) users"
        }
        row.wallMilliseconds.append(wall.milliseconds)
        row.peakInFlight.append(stats.peakInFlight)
        row.queuedInTransport.append(transport.peak)
        row.refreshes.append(refreshes)
    }

    static func render(_ rows: [StormRow], _ options: Options) -> String {
        var lines = [
            "restart storm: \(options.stormUsers) stored users whose tokens expired while the server was down, "
                + "\(options.stormRequests) first requests at once through one UserSessionRegistry, the fixture "
                + "answering each token request after \(options.stormDelayMilliseconds) ms; median of "
                + "\(options.repetitions) [min-max]; in flight: the most token requests the provider answered at once; "
                + "handed over: the most the transport had been given at once",
            pad("transport", 24) + pad("wall ms", 24) + pad("in flight", 18) + pad("handed over", 18)
                + pad("refreshes", 12) + "failures",
        ]
        for row in rows {
            lines.append(
                pad(row.transport, 24) + pad(spread(row.wallMilliseconds, 0), 24)
                    + pad(spread(row.peakInFlight.map(Double.init), 0), 18)
                    + pad(spread(row.queuedInTransport.map(Double.init), 0), 18)
                    + pad(spread(row.refreshes.map(Double.init), 0), 12)
                    + "\(row.failures)" + (row.firstFailure.map { " (first: \($0))" } ?? ""))
        }
        return lines.joined(separator: "\n")
    }

    static func render(_ rows: [Row], _ options: Options) -> String {
        var lines = [
            "transport: \(options.users) users refreshing at once against the local OAuth fixture (python3 "
                + "ThreadingHTTPServer on 127.0.0.1, one connection per request), median of \(options.repetitions) "
                + "[min-max]",
            pad("transport", 18) + pad("refreshes/s", 26) + pad("p50 ms", 22) + pad("p99 ms", 22) + "failures",
        ]
        for row in rows {
            lines.append(
                pad(row.transport, 18) + pad(spread(row.refreshesPerSecond, 0), 26)
                    + pad(spread(row.p50Milliseconds, 1), 22) + pad(spread(row.p99Milliseconds, 1), 22)
                    + "\(row.failures)" + (row.firstFailure.map { " (first: \($0))" } ?? ""))
        }
        return lines.joined(separator: "\n")
    }

    /// The value at `fraction` of the sorted `values` (nearest rank).
    static func percentile(_ values: [Double], _ fraction: Double) -> Double {
        guard !values.isEmpty else { return 0 }
        let rank = Int((fraction * Double(values.count)).rounded(.up)) - 1
        return values[min(max(rank, 0), values.count - 1)]
    }

    static func spread(_ values: [Double], _ places: Int) -> String {
        let sorted = values.sorted()
        guard let first = sorted.first, let last = sorted.last else { return "-" }
        let median = sorted[sorted.count / 2]
        return "\(format(median, places)) [\(format(first, places))-\(format(last, places))]"
    }

    static func format(_ value: Double, _ places: Int) -> String { String(format: "%.\(places)f", value) }

    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count)
    }

    static func note(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }
}

/// A transport that counts the requests it has open at once and remembers the most.
final class InFlightCountingTransport: HTTPTransport {
    private let inner: any HTTPTransport
    private let counts = Mutex((open: 0, peak: 0))

    init(_ inner: any HTTPTransport) { self.inner = inner }

    /// The most requests open at once so far.
    var peak: Int { counts.withLock { $0.peak } }

    func send(_ request: HTTPTransportRequest) async throws -> HTTPTransportResponse {
        counts.withLock {
            $0.open += 1
            $0.peak = max($0.peak, $0.open)
        }
        defer { counts.withLock { $0.open -= 1 } }
        return try await inner.send(request)
    }
}

extension Duration {
    /// The duration in milliseconds, as a `Double`.
    fileprivate var milliseconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) * 1e3 + Double(attoseconds) / 1e15
    }
}
#endif
