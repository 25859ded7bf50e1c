import Foundation

/// wrk, the HTTP load generator (Debian's `wrk`), run on a CPU of its own and read back.
struct Wrk {
    /// What one run printed.
    struct Result: Sendable, Encodable {
        var requestsPerSecond: Double
        var p50Microseconds: Double
        var p99Microseconds: Double
        var requests: Int
        /// Answers other than 2xx or 3xx, plus connect, read, write and timeout errors.
        var errors: Int
    }

    var executable: URL
    /// The CPU wrk is pinned to (through `taskset`), or `nil` to leave it unpinned.
    var cpu: Int?

    /// wrk from the `PATH`, or an error saying how to install it.
    static func locate(cpu: Int?) throws -> Wrk {
        let directories = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
        for directory in directories {
            let candidate = URL(fileURLWithPath: String(directory)).appending(path: "wrk")
            if FileManager.default.isExecutableFile(atPath: candidate.path) {
                return Wrk(executable: candidate, cpu: cpu)
            }
        }
        throw BenchmarkError("wrk is not installed (apt-get install wrk)")
    }

    /// Loads `url` with `connections` connections on one thread for `seconds`, sending `headers`.
    func run(url: URL, connections: Int, seconds: Int, headers: [String]) async throws -> Result {
        var arguments = ["-t1", "-c\(connections)", "-d\(seconds)s", "--latency", "--timeout", "5s"]
        for header in headers { arguments += ["-H", header] }
        arguments.append(url.absoluteString)
        let output = try await Self.output(of: executable, arguments, pinnedTo: cpu)
        return try Self.parse(output)
    }

    /// Standard output of `executable` run with `arguments` (pinned to `cpu` through `taskset`); an error when it
    /// exits with another status than 0.
    static func output(of executable: URL, _ arguments: [String], pinnedTo cpu: Int?) async throws -> String {
        let (data, status) = try await runToEnd(executable, arguments, cpu: cpu)
        let text = String(decoding: data, as: UTF8.self)
        guard status == 0 else { throw BenchmarkError("\(executable.lastPathComponent) exited with status \(status)") }
        return text
    }

    /// The figures of wrk's report (`--latency`): requests per second, the 50th and 99th percentiles of latency,
    /// the requests made, and the errors and non-2xx/3xx answers.
    static func parse(_ report: String) throws -> Result {
        var result = Result(requestsPerSecond: -1, p50Microseconds: -1, p99Microseconds: -1, requests: -1, errors: 0)
        for line in report.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard let first = fields.first else { continue }
            switch first {
            case "Requests/sec:":
                if fields.count > 1, let value = Double(fields[1]) { result.requestsPerSecond = value }
            case "50%":
                if fields.count > 1 { result.p50Microseconds = try microseconds(fields[1]) }
            case "99%":
                if fields.count > 1 { result.p99Microseconds = try microseconds(fields[1]) }
            case "Non-2xx":
                // "Non-2xx or 3xx responses: N"
                if let last = fields.last, let count = Int(last) { result.errors += count }
            case "Socket":
                // "Socket errors: connect A, read B, write C, timeout D"
                for field in fields.dropFirst(2) {
                    if let count = Int(field.trimmingCharacters(in: CharacterSet(charactersIn: ","))) {
                        result.errors += count
                    }
                }
            default:
                // "N requests in 3.00s, 1.00MB read"
                if fields.count > 2, fields[1] == "requests", fields[2] == "in", let count = Int(first) {
                    result.requests = count
                }
            }
        }
        guard result.requestsPerSecond >= 0, result.p50Microseconds >= 0, result.p99Microseconds >= 0,
            result.requests >= 0
        else {
            throw BenchmarkError("wrk printed no figures")
        }
        return result
    }

    /// `123.45us`, `1.20ms` or `2.00s` in microseconds.
    static func microseconds(_ text: Substring) throws -> Double {
        for (unit, scale) in [("us", 1.0), ("ms", 1e3), ("s", 1e6)] where text.hasSuffix(unit) {
            if let value = Double(text.dropLast(unit.count)) { return value * scale }
        }
        throw BenchmarkError("wrk printed a latency without a known unit")
    }
}

/// This benchmark's own executable, which the fleet and web workloads start again in another mode.
let benchmarkExecutable = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])

/// Runs `executable` with `arguments` (through `taskset` on `cpu` when one is given) until it exits; its standard
/// output and exit status.
func runToEnd(_ executable: URL, _ arguments: [String], cpu: Int?) async throws -> (output: Data, status: Int32) {
    let process = pinnedProcess(executable, arguments, cpu: cpu)
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    return await Task.detached {
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (data, process.terminationStatus)
    }.value
}

/// A process that runs `executable` with `arguments`, through `taskset` on `cpu` when one is given (not started).
func pinnedProcess(_ executable: URL, _ arguments: [String], cpu: Int?) -> Process {
    let process = Process()
    if let cpu {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/taskset")
        process.arguments = ["-c", "\(cpu)", executable.path] + arguments
    } else {
        process.executableURL = executable
        process.arguments = arguments
    }
    return process
}
