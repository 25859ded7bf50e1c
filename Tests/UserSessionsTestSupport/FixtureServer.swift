import Dispatch
import Foundation
import UserSessions

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a fixture server could not be used.
package struct FixtureServerError: Error, CustomStringConvertible {
    package var description: String
}

/// A python3 standard-library server from `Tests/UserSessionsTests/Fixtures`, started by a test (or the benchmark) on
/// 127.0.0.1.
///
/// The script must bind port 0 and print the chosen port as the first line of its standard output. It gets a pipe as
/// standard input that stays open until ``stop()``; a script that exits at end of input therefore also dies with a
/// crashed test process. Standard error is discarded; standard output after the first line is drained.
///
/// Use ``run(script:arguments:_:)`` so the server is stopped on every path, or ``start(script:arguments:timeout:)``
/// and ``stop()`` yourself (an instance that is released while running is terminated).
package final class FixtureServer: Sendable {
    /// The port the server listens on.
    package let port: Int
    /// `http://127.0.0.1:<port>`.
    package let baseURL: URL
    // Process is documented as thread-safe for run/terminate/isRunning; it is only touched through those here.
    private let process: ProcessBox
    private let input: Pipe

    private init(port: Int, process: ProcessBox, input: Pipe) {
        self.port = port
        self.process = process
        self.input = input
        baseURL = URL(string: "http://127.0.0.1:\(port)") ?? URL(fileURLWithPath: "/")
    }

    deinit {
        process.terminate()
    }

    /// The URL of `path` on the server, such as `/token_cache`.
    package func url(_ path: String) -> URL {
        baseURL.appending(path: path)
    }

    /// Whether python3 can import `modules` (a comma-separated list, such as `"authlib, flask"`), which a fixture
    /// script needs.
    package static func pythonCanImport(_ modules: String) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", "import " + modules]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do {
            try process.run()
            process.waitUntilExit()
            return process.terminationStatus == 0
        } catch {
            return false
        }
    }

    /// `Tests/UserSessionsTests/Fixtures`, found from this file's path at build time.
    package static let fixturesDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appending(path: "UserSessionsTests").appending(path: "Fixtures")

    /// Starts `script` (a file name in `directory`, by default the Fixtures folder) with `arguments` and waits for
    /// its port.
    ///
    /// The first line is read on a dedicated thread, never on the cooperative pool; if it does not arrive within
    /// `timeout` the process is terminated and this throws.
    package static func start(
        script: String,
        in directory: URL = fixturesDirectory,
        arguments: [String] = [],
        timeout: Duration = .seconds(20)
    ) async throws -> FixtureServer {
        let scriptURL = directory.appending(path: script)
        guard FileManager.default.fileExists(atPath: scriptURL.path(percentEncoded: false)) else {
            throw FixtureServerError(description: "no fixture script at \(scriptURL.path(percentEncoded: false))")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-u", scriptURL.path(percentEncoded: false)] + arguments
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let box = ProcessBox(process)

        let firstLine = await readFirstLine(of: output, timeout: timeout)
        guard let firstLine, let port = Int(firstLine.trimmingCharacters(in: .whitespaces)), port > 0 else {
            box.terminate()
            throw FixtureServerError(description: "\(script) did not print its port (got \(firstLine ?? "nothing"))")
        }
        return FixtureServer(port: port, process: box, input: input)
    }

    /// Starts a server, runs `body` with it, and stops it whether `body` returns or throws.
    package static func run<Result>(
        script: String,
        in directory: URL = fixturesDirectory,
        arguments: [String] = [],
        timeout: Duration = .seconds(20),
        _ body: (FixtureServer) async throws -> Result
    ) async throws -> Result {
        let server = try await start(script: script, in: directory, arguments: arguments, timeout: timeout)
        do {
            let result = try await body(server)
            await server.stop()
            return result
        } catch {
            await server.stop()
            throw error
        }
    }

    /// Terminates the server and waits for it to exit (on a dispatch thread, not the cooperative pool).
    package func stop() async {
        try? input.fileHandleForWriting.close()
        process.terminate()
        await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                self.process.waitUntilExit()
                continuation.resumeVisibly()
            }
        }
    }

    /// Reads up to the first newline on a dedicated thread, then keeps draining until end of file so the child never
    /// blocks on a full pipe. Returns `nil` on end of file or timeout.
    private static func readFirstLine(of pipe: Pipe, timeout: Duration) async -> String? {
        let descriptor = pipe.fileHandleForReading.fileDescriptor
        let pending = Locked<CheckedContinuation<String?, Never>?>(nil)
        let deliver: @Sendable (String?) -> Void = { line in
            let continuation = pending.withLock { slot -> CheckedContinuation<String?, Never>? in
                defer { slot = nil }
                return slot
            }
            continuation?.resumeVisibly(returning: line)
        }
        return await withVisibleCheckedContinuation { (continuation: CheckedContinuation<String?, Never>) in
            pending.withLock { $0 = continuation }
            let reader = Thread {
                var line: [UInt8] = []
                var delivered = false
                var byte: UInt8 = 0
                while true {
                    let count = read(descriptor, &byte, 1)
                    if count < 0, errno == EINTR { continue }
                    if count <= 0 { break }
                    if delivered { continue }
                    if byte == UInt8(ascii: "\n") {
                        delivered = true
                        deliver(String(decoding: line, as: UTF8.self))
                    } else {
                        line.append(byte)
                    }
                }
                if !delivered { deliver(nil) }
            }
            reader.start()
            let (seconds, attoseconds) = timeout.components
            let delay = Double(seconds) + Double(attoseconds) / 1e18
            DispatchQueue.global().asyncAfter(deadline: .now() + delay) { deliver(nil) }
        }
    }
}

/// Holds a `Process`. Foundation's `Process` is safe to `terminate`, query and wait on from any thread, which is
/// all this wrapper exposes; the configuration is done before it is wrapped.
private final class ProcessBox: @unchecked Sendable {
    private let process: Process

    init(_ process: Process) { self.process = process }

    func terminate() {
        if process.isRunning { process.terminate() }
    }

    func waitUntilExit() {
        process.waitUntilExit()
    }
}
