#if Hummingbird || Vapor
import Foundation
import UserSessions

/// Workload "web": what the session middleware adds to a signed-in GET, under a real load generator.
///
/// For each framework this build has (the `Hummingbird` and `Vapor` traits), the same route `GET /app/me` is served
/// by a child process (``WebOverheadServer``) with no session (the floor), with the framework's own sessions (the
/// peer: hummingbird-auth's `SessionMiddleware`, Vapor's `SessionsMiddleware`, both over their in-memory drivers)
/// and with this package's session middleware over the in-memory, file and PostgreSQL record stores (cookie →
/// record → session → fresh token). wrk (Debian's) loads it on loopback, the server pinned to CPU 0 and wrk to
/// CPU 1 when there are two: once with one connection (latency: p50 and p99 of a request on an idle server) and
/// once with `--connections` (throughput: requests per second on one busy core). Every route is checked first:
/// 200 with the cookie, and not 200 without it where a session is required.
///
/// Run it with `swift run -c release --traits Hummingbird,Vapor RefreshContention --web [--quick] [--json]`
/// (add `PostgreSQL` and run under `Scripts/with-postgres.sh` for the PostgreSQL rows).
struct WebOverheadWorkload {
    struct Options {
        var repetitions = 3
        var seconds = 4
        var warmUpSeconds = 1
        var connections = 32
        var json = false

        init(arguments: [String]) throws {
            var remaining = arguments[...]
            while let argument = remaining.popFirst() {
                switch argument {
                case "--quick":
                    repetitions = 1
                    seconds = 1
                case "--json": json = true
                case "--repetitions": repetitions = try Self.positive(remaining.popFirst(), argument)
                case "--seconds": seconds = try Self.positive(remaining.popFirst(), argument)
                case "--connections": connections = try Self.positive(remaining.popFirst(), argument)
                default: throw BenchmarkError("unknown argument '\(argument)' for --web")
                }
            }
        }

        private static func positive(_ text: String?, _ argument: String) throws -> Int {
            guard let value = text.flatMap({ Int($0) }), value > 0 else {
                throw BenchmarkError("\(argument) needs a positive number")
            }
            return value
        }
    }

    /// One configuration: a framework, a kind of route, and (for this package's middleware) a record store.
    struct Configuration: Hashable, Sendable {
        var framework: WebOverheadServer.Framework
        var route: WebOverheadServer.Route
        var store: WebOverheadServer.RecordStore

        var label: String {
            switch route {
            case .bare: "bare route"
            case .peer:
                framework == .hummingbird ? "hummingbird-auth SessionMiddleware" : "Vapor SessionsMiddleware"
            case .sessions: "WebSessionMiddleware (\(store.rawValue))"
            }
        }
    }

    /// A configuration's figures over the repetitions.
    struct Row: Encodable {
        var framework: String
        var route: String
        var store: String?
        var requestsPerSecond: [Double] = []
        var p50Microseconds: [Double] = []
        var p99Microseconds: [Double] = []
        var errors = 0
    }

    let options: Options
    let wrk: Wrk
    /// The CPU the server is pinned to, or `nil`.
    let serverCPU: Int?

    static func main(arguments: [String]) async -> Int32 {
        do {
            let options = try Options(arguments: arguments)
            let pinned = ProcessInfo.processInfo.activeProcessorCount >= 2
            let workload = WebOverheadWorkload(
                options: options, wrk: try Wrk.locate(cpu: pinned ? 1 : nil), serverCPU: pinned ? 0 : nil)
            let rows = try await workload.run()
            if options.json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
                print(String(decoding: try encoder.encode(rows), as: UTF8.self))
            } else {
                print(workload.render(rows))
            }
            return rows.contains { $0.errors > 0 } ? 1 : 0
        } catch {
            Progress.note("web: \(error)")
            return 2
        }
    }

    /// The configurations this build and machine can run, and notes on those left out.
    static func configurations() -> (run: [Configuration], skipped: [String]) {
        var run: [Configuration] = []
        var skipped: [String] = []
        for framework in WebOverheadServer.Framework.built {
            run.append(Configuration(framework: framework, route: .bare, store: .memory))
            run.append(Configuration(framework: framework, route: .peer, store: .memory))
            for store in WebOverheadServer.RecordStore.allCases {
                if store == .postgres, let reason = FleetStore.postgresUnavailable {
                    skipped.append("\(framework.rawValue) with the PostgreSQL record store: \(reason)")
                    continue
                }
                run.append(Configuration(framework: framework, route: .sessions, store: store))
            }
        }
        return (run, skipped)
    }

    func run() async throws -> [Row] {
        let (configurations, skipped) = Self.configurations()
        for note in skipped { Progress.note("web: left out: \(note)") }
        var rows = configurations.map {
            Row(
                framework: $0.framework.rawValue, route: $0.label,
                store: $0.route == .sessions ? $0.store.rawValue : nil)
        }
        for repetition in 0..<options.repetitions {
            // Alternate the order so that no configuration always runs on a machine warmed by the same one.
            let order = repetition.isMultiple(of: 2) ? Array(configurations.indices) : configurations.indices.reversed()
            for index in order {
                Progress.note(
                    "web: \(configurations[index].framework.rawValue), \(configurations[index].label), "
                        + "repetition \(repetition + 1) of \(options.repetitions)")
                let (latency, throughput) = try await measure(configurations[index])
                rows[index].p50Microseconds.append(latency.p50Microseconds)
                rows[index].p99Microseconds.append(latency.p99Microseconds)
                rows[index].requestsPerSecond.append(throughput.requestsPerSecond)
                rows[index].errors += latency.errors + throughput.errors
            }
        }
        return rows
    }

    /// Starts the server for `configuration`, signs in, checks the route, warms it up, then runs wrk for latency
    /// (one connection) and for throughput.
    func measure(_ configuration: Configuration) async throws -> (latency: Wrk.Result, throughput: Wrk.Result) {
        let directory = FileManager.default.temporaryDirectory.appending(path: "web-overhead-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try WebOverheadChild(
            arguments: [
                WebOverheadServer.flag, configuration.framework.rawValue, configuration.route.rawValue,
                configuration.store.rawValue, directory.path,
            ], cpu: serverCPU)
        defer { server.stop() }
        let port = try await server.port()
        guard let base = URL(string: "http://127.0.0.1:\(port)"),
            let url = URL(string: base.absoluteString + WebOverheadServer.path)
        else { throw BenchmarkError("bad server URL") }
        var headers: [String] = []
        if configuration.route != .bare {
            let cookie = try await Self.signIn(base)
            headers.append("Cookie: \(cookie)")
            let refused = try await Self.get(url, cookie: nil)
            guard refused.statusCode != 200 else {
                throw BenchmarkError("\(configuration.label) answered 200 without a session")
            }
        }
        let answer = try await Self.get(url, cookie: headers.first.map { String($0.dropFirst("Cookie: ".count)) })
        guard answer.statusCode == 200, answer.body == Data("ok".utf8) else {
            throw BenchmarkError("\(configuration.label) answered \(answer.statusCode) with the session")
        }
        _ = try await wrk.run(
            url: url, connections: options.connections, seconds: options.warmUpSeconds, headers: headers)
        let latency = try await wrk.run(url: url, connections: 1, seconds: options.seconds, headers: headers)
        let throughput = try await wrk.run(
            url: url, connections: options.connections, seconds: options.seconds, headers: headers)
        return (latency, throughput)
    }

    /// Signs the user in; returns the session cookie as `name=value`.
    static func signIn(_ base: URL) async throws -> String {
        guard let url = URL(string: base.absoluteString + WebOverheadServer.loginPath) else {
            throw BenchmarkError("bad sign-in URL")
        }
        let response = try await get(url, cookie: nil)
        guard response.statusCode == 200,
            let setCookie = response.headers.values(for: "Set-Cookie").first,
            let pair = setCookie.split(separator: ";").first, pair.contains("=")
        else { throw BenchmarkError("signing in gave no session cookie (status \(response.statusCode))") }
        return String(pair).trimmingCharacters(in: .whitespaces)
    }

    /// A GET of `url`, following no redirect.
    static func get(_ url: URL, cookie: String?) async throws -> HTTPTransportResponse {
        var headers = HTTPTransportHeaders()
        if let cookie { headers.add(name: "Cookie", value: cookie) }
        return try await URLSessionHTTPTransport().send(
            HTTPTransportRequest(
                method: .get, url: url, headers: headers, body: nil, timeout: .seconds(10),
                maximumResponseBytes: 1 << 16))
    }

    func render(_ rows: [Row]) -> String {
        func median(_ values: [Double]) -> Double { Summary(values)?.median ?? 0 }
        var table = TextTable(
            title: "web request overhead: GET \(WebOverheadServer.path) on loopback, server on "
                + (serverCPU.map { "CPU \($0)" } ?? "any CPU") + ", wrk on "
                + (wrk.cpu.map { "CPU \($0)" } ?? "any CPU")
                + "; p50/p99 with 1 connection, requests/s with \(options.connections); median of "
                + "\(options.repetitions) runs of \(options.seconds) s",
            headers: [
                "framework", "route", "p50 µs", "p99 µs", "p50 added", "requests/s", "× bare", "× peer", "errors",
            ],
            labelColumns: 2)
        for row in rows {
            let bare = rows.first { $0.framework == row.framework && $0.store == nil && $0.route == "bare route" }
            let peer = rows.first { $0.framework == row.framework && $0.store == nil && $0.route != "bare route" }
            let p50 = median(row.p50Microseconds)
            let rps = median(row.requestsPerSecond)
            let bareP50 = bare.map { median($0.p50Microseconds) } ?? 0
            let bareRPS = bare.map { median($0.requestsPerSecond) } ?? 0
            let peerRPS = peer.map { median($0.requestsPerSecond) } ?? 0
            table.rows.append([
                row.framework, row.route, Format.number(p50, places: 0),
                Format.number(median(row.p99Microseconds), places: 0),
                bareP50 > 0 ? Format.number((p50 / bareP50 - 1) * 100, places: 0) + "%" : "-",
                Format.integer(Int(rps.rounded())),
                bareRPS > 0 ? Format.number(rps / bareRPS, places: 2) : "-",
                peerRPS > 0 ? Format.number(rps / peerRPS, places: 2) : "-",
                "\(row.errors)",
            ])
        }
        return table.render()
    }
}

/// A ``WebOverheadServer`` child process, pinned to a CPU, stopped by closing its standard input.
final class WebOverheadChild {
    private let process: Process
    private let input: Pipe
    private let output: Pipe

    init(arguments: [String], cpu: Int?) throws {
        process = pinnedProcess(benchmarkExecutable, arguments, cpu: cpu)
        input = Pipe()
        output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
    }

    /// The port the child announces on its first line, or an error when it exits first or says nothing within 60 s
    /// (then it is killed).
    func port() async throws -> Int {
        let handle = output.fileHandleForReading
        let process = process
        let reading = Task.detached { () -> String in
            var bytes: [UInt8] = []
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                bytes += chunk
                if bytes.contains(UInt8(ascii: "\n")) { break }
            }
            return String(decoding: bytes, as: UTF8.self)
        }
        let watchdog = Task.detached {
            try await Task.sleep(for: .seconds(60))
            // SIGKILL, not terminate()'s SIGTERM: the child inherits the signal mask of the dispatch thread that
            // spawned it, which blocks SIGTERM.
            kill(process.processIdentifier, SIGKILL)
        }
        let line = await reading.value
        watchdog.cancel()
        guard let port = Int(line.trimmingCharacters(in: .whitespacesAndNewlines)), port > 0 else {
            throw BenchmarkError("the web server did not start")
        }
        return port
    }

    /// Closes the child's standard input (it exits) and waits for it.
    func stop() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }
}
#endif
