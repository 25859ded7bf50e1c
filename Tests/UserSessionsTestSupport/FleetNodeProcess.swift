import Foundation
import UserSessions

/// Finds an executable of this package built by SwiftPM next to the test bundle (whatever the scratch path), else in
/// `.build/debug`: the helpers the multi-process tests start (`FleetNode`, `FileStoreCrashWriter`).
package func locateBuiltExecutable(named executableName: String, sourceFile: String = #filePath) -> URL? {
    var candidates: [URL] = []
    for start in [Bundle.main.executableURL, CommandLine.arguments.first.map { URL(fileURLWithPath: $0) }] {
        // Linux: <scratch>/<triple>/debug/<package>PackageTests.xctest; macOS: a bundle a few levels deeper.
        var directory = start?.deletingLastPathComponent()
        for _ in 0..<4 {
            guard let current = directory else { break }
            candidates.append(current.appending(path: executableName))
            directory = current.deletingLastPathComponent()
        }
    }
    let packageRoot = URL(fileURLWithPath: sourceFile).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    candidates.append(packageRoot.appending(path: ".build/debug/\(executableName)"))
    return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path(percentEncoded: false)) }
}

/// A finished `FleetNode` process: its exit status and its JSON summary line (the last line it printed).
package struct NodeProcess: Sendable {
    package var status: Int32
    package var summaryLine: String

    package init(status: Int32, summaryLine: String) {
        self.status = status
        self.summaryLine = summaryLine
    }

    package var summary: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(summaryLine.utf8))) as? [String: Any] ?? [:]
    }

    /// Runs one `executable` per name at once, with `arguments` and `--name NAME`, each to its end.
    package static func runAll(_ executable: URL, _ arguments: [String], names: [String]) async throws -> [NodeProcess]
    {
        try await withThrowingTaskGroup(of: (Int, NodeProcess).self) { group in
            for (index, name) in names.enumerated() {
                group.addTask { (index, try await run(executable, arguments + ["--name", name])) }
            }
            var nodes: [(Int, NodeProcess)] = []
            for try await node in group { nodes.append(node) }
            return nodes.sorted { $0.0 < $1.0 }.map(\.1)
        }
    }

    /// What is wrong with a run of `FleetNode --client-credentials` nodes against the OAuth fixture (tokens of 1 s, the
    /// grant number `expiries` long-lived): it must show `expiries` grants, none premature, all made by the nodes (the
    /// others adopted), and every node settled without errors on the same final token. Empty when all is well.
    package static func clientCredentialsFleetProblems(
        _ stats: OAuthFixtureServer.Stats, _ nodes: [NodeProcess], expiries: Int
    ) -> [String] {
        var problems: [String] = []
        for node in nodes
        where node.status != 0 || node.summary["errors"] as? Int != 0 || node.summary["settled"] as? Bool != true {
            problems.append("a node failed: \(node.summaryLine)")
        }
        if stats.clientCredentials != expiries { problems.append("\(stats.clientCredentials) grants, not \(expiries)") }
        if stats.prematureGrants != 0 { problems.append("\(stats.prematureGrants) grants before half a lifetime") }
        let issued = nodes.map { $0.summary["issued"] as? Int ?? -1 }.reduce(0, +)
        if issued != expiries { problems.append("the nodes made \(issued) grants, not \(expiries)") }
        let adopted = nodes.map { $0.summary["adopted"] as? Int ?? 0 }.reduce(0, +)
        if adopted < nodes.count - 1 { problems.append("only \(adopted) adoptions from the store") }
        let hashes = Set(nodes.map { $0.summary["final_token_hash"] as? String ?? "?" })
        if hashes.count != 1 { problems.append("the nodes ended on different tokens: \(hashes.sorted())") }
        return problems
    }

    /// Runs `executable` with `arguments` to its end.
    package static func run(_ executable: URL, _ arguments: [String]) async throws -> NodeProcess {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = FileHandle.nullDevice
        let status: Int32 = try await withVisibleCheckedThrowingContinuation { continuation in
            process.terminationHandler = { continuation.resumeVisibly(returning: $0.terminationStatus) }
            do {
                try process.run()
            } catch {
                process.terminationHandler = nil
                continuation.resumeVisibly(throwing: error)
            }
        }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        let line = String(decoding: data, as: UTF8.self).split(separator: "\n").last.map(String.init) ?? ""
        return NodeProcess(status: status, summaryLine: line)
    }
}

/// A running `FleetNode` process the test talks to line by line: it reads what the node prints, writes to its
/// standard input, kills it.
///
/// `@unchecked Sendable`: the `Process`, the pipes and `buffered` are touched only by the one test task that owns
/// this value, one call at a time (each blocking read runs on a dispatch thread while that task awaits it).
package final class LiveNode: @unchecked Sendable {
    package let name: String
    private let process = Process()
    private let output = Pipe()
    private let input: Pipe?
    private var buffered = Data()

    /// Starts `executable`; `withInput` gives it a standard input the test writes to (else it reads end-of-file).
    package init(_ executable: URL, _ arguments: [String], name: String, withInput: Bool = false) throws {
        self.name = name
        input = withInput ? Pipe() : nil
        process.executableURL = executable
        process.arguments = arguments + ["--name", name]
        process.standardOutput = output
        process.standardInput = input ?? FileHandle.nullDevice
        try process.run()
    }

    package var processIdentifier: Int32 { process.processIdentifier }

    /// The next line the node prints, or `nil` once it closed its output.
    package func nextLine() async -> String? {
        await withVisibleCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resumeVisibly(returning: self.readLineNow()) }
        }
    }

    /// Every line the node prints from now until it closes its output.
    package func remainingLines() async -> [String] {
        var lines: [String] = []
        while let line = await nextLine() { lines.append(line) }
        return lines
    }

    private func readLineNow() -> String? {
        while true {
            if let newline = buffered.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffered[buffered.startIndex..<newline], as: UTF8.self)
                buffered = Data(buffered[buffered.index(after: newline)...])
                return line
            }
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { return nil }
            buffered.append(chunk)
        }
    }

    /// Writes `line` to the node's standard input.
    package func send(_ line: String) throws {
        try input?.fileHandleForWriting.write(contentsOf: Data((line + "\n").utf8))
    }

    /// Sends SIGKILL.
    package func kill() { _ = Foundation.kill(process.processIdentifier, SIGKILL) }

    /// Waits for the process to end; returns its termination status and whether a signal ended it.
    package func exit() async -> (status: Int32, signalled: Bool) {
        await withVisibleCheckedContinuation { continuation in
            DispatchQueue.global().async {
                self.process.waitUntilExit()
                continuation.resumeVisibly(
                    returning: (self.process.terminationStatus, self.process.terminationReason == .uncaughtSignal))
            }
        }
    }
}
