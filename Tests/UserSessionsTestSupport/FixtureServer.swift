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
/// crashed test process. Standard error is kept until the port arrives, to explain a failed start, and drained after
/// it; standard output after the first line is drained.
///
/// Use ``run(script:in:arguments:timeout:_:)`` so the server is stopped on every path, or
/// ``start(script:in:arguments:timeout:attempts:)`` and ``stop()`` yourself (an instance that is released while running
/// is terminated).
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
        } catch {
            return false
        }
        let box = ProcessBox(process)
        guard box.waitForExit(upTo: .seconds(60)) else {
            box.signal(SIGKILL)
            return false
        }
        return process.terminationReason == .exit && process.terminationStatus == 0
    }

    /// `Tests/UserSessionsTests/Fixtures`, found from this file's path at build time.
    package static let fixturesDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appending(path: "UserSessionsTests").appending(path: "Fixtures")

    /// Starts `script` (a file name in `directory`, by default the Fixtures folder) with `arguments` and waits for
    /// its port.
    ///
    /// The first line is read on a dedicated thread, never on the cooperative pool. A start fails when the script
    /// exits or closes its output before printing a port, or when the port does not arrive within `timeout`; a hung
    /// script is first sent `SIGABRT`, which makes python's fault handler (`-X faulthandler`) write every thread's
    /// stack to standard error. A failed start is tried again, up to `attempts` starts in all: a fixture that fails
    /// once on a loaded machine does not fail the test it serves, and each failure is reported on the test process's
    /// standard error with the script's exit status and the end of what it wrote there before its port. When every
    /// start fails this throws with all of that.
    package static func start(
        script: String,
        in directory: URL = fixturesDirectory,
        arguments: [String] = [],
        timeout: Duration = .seconds(20),
        attempts: Int = 3
    ) async throws -> FixtureServer {
        let scriptURL = directory.appending(path: script)
        guard FileManager.default.fileExists(atPath: scriptURL.path(percentEncoded: false)) else {
            throw FixtureServerError(description: "no fixture script at \(scriptURL.path(percentEncoded: false))")
        }
        var failures: [String] = []
        for attempt in 1...max(1, attempts) {
            switch try await launch(scriptURL, arguments: arguments, timeout: timeout) {
            case .started(let server):
                return server
            case .failed(let failure):
                let report = "\(script) start \(attempt) of \(max(1, attempts)) failed: \(failure)"
                FileHandle.standardError.write(Data((report + "\n").utf8))
                failures.append(report)
            }
        }
        throw FixtureServerError(description: failures.joined(separator: "\n"))
    }

    /// What one start of a script came to.
    private enum Launch {
        case started(FixtureServer)
        case failed(String)
    }

    /// What ended the wait for the first line.
    private enum FirstLine: Sendable {
        case line(String)
        case ended
        case timedOut
    }

    /// Starts the script once and waits for its port; on failure the process is gone when this returns.
    private static func launch(_ scriptURL: URL, arguments: [String], timeout: Duration) async throws -> Launch {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        // A child inherits the signal mask of the thread that spawns it, and dispatch's worker threads block almost
        // every signal: without the reset the script could not be ended by SIGTERM or aborted for its stack.
        #if os(Linux)
        let resetSignals = ["--default-signal"]
        #else
        let resetSignals: [String] = []
        #endif
        process.arguments =
            resetSignals + ["python3", "-u", "-X", "faulthandler", scriptURL.path(percentEncoded: false)] + arguments
        let input = Pipe()
        let output = Pipe()
        let errors = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        let outcome = Outcome()
        process.terminationHandler = { _ in outcome.deliver(.ended) }
        let startupErrors = StartupErrors()
        try process.run()
        let box = ProcessBox(process)
        startupErrors.drain(errors)

        outcome.read(output)
        let first = await outcome.wait(timeout: timeout)
        if case .line(let line) = first, let port = Int(line.trimmingCharacters(in: .whitespaces)), port > 0 {
            startupErrors.stopKeeping()
            return .started(FixtureServer(port: port, process: box, input: input))
        }
        let what: String
        switch first {
        case .line(let line): what = "printed \"\(line.prefix(80))\" instead of a port"
        case .ended: what = "ended before printing its port"
        case .timedOut: what = "printed no port within \(timeout)"
        }
        try? input.fileHandleForWriting.close()
        if case .timedOut = first {
            await box.stop(sending: SIGABRT, after: .seconds(5))
        } else {
            await box.stop(after: .seconds(5))
        }
        let status = box.exitDescription
        let stderr = startupErrors.wait(upTo: .seconds(5))
        return .failed("\(what); \(status); its standard error ended with: \(stderr.isEmpty ? "nothing" : stderr)")
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
        await process.stop(after: .seconds(10))
    }

    /// The first line of the script's standard output, its end or the timeout, whichever comes first.
    ///
    /// The termination handler can report the end before ``wait(timeout:)`` is called; that report is kept.
    private final class Outcome: Sendable {
        private enum State {
            case idle
            case early(FirstLine)
            case waiting(CheckedContinuation<FirstLine, Never>)
            case done
        }

        private let state = Locked(State.idle)

        /// Reports `value` if nothing was reported before.
        func deliver(_ value: FirstLine) {
            let continuation = state.withLock { state -> CheckedContinuation<FirstLine, Never>? in
                switch state {
                case .idle:
                    state = .early(value)
                    return nil
                case .waiting(let continuation):
                    state = .done
                    return continuation
                case .early, .done:
                    return nil
                }
            }
            continuation?.resumeVisibly(returning: value)
        }

        /// Reads `pipe` on a dedicated thread: reports its first line (or its end), then keeps draining it until
        /// end of file so the child never blocks on a full pipe.
        func read(_ pipe: Pipe) {
            readToEnd(pipe, from: (line: [UInt8](), delivered: false)) { [self] first, bytes in
                guard !first.delivered else { return }
                guard let newline = bytes.firstIndex(of: UInt8(ascii: "\n")) else {
                    first.line += bytes
                    return
                }
                first.line += bytes[..<newline]
                first.delivered = true
                deliver(.line(String(decoding: first.line, as: UTF8.self)))
            } end: { [self] first in
                if !first.delivered { deliver(.ended) }
            }
        }

        /// Waits for the first report, or reports `.timedOut` after `timeout`.
        func wait(timeout: Duration) async -> FirstLine {
            await withVisibleCheckedContinuation { (continuation: CheckedContinuation<FirstLine, Never>) in
                let early = state.withLock { state -> FirstLine? in
                    if case .early(let value) = state {
                        state = .done
                        return value
                    }
                    state = .waiting(continuation)
                    return nil
                }
                if let early {
                    continuation.resumeVisibly(returning: early)
                    return
                }
                DispatchQueue.global().asyncAfter(deadline: .now() + timeout.seconds) { self.deliver(.timedOut) }
            }
        }
    }

    /// The end of what a script writes to standard error before it prints its port, kept to explain a failed start;
    /// after the port nothing is kept (a running fixture's errors could carry the tokens it serves), only drained.
    private final class StartupErrors: Sendable {
        private struct State {
            var tail: [UInt8] = []
            var keeping = true
        }

        private static let kept = 2_000
        private let state = Locked(State())
        private let finished = DispatchSemaphore(value: 0)

        /// Reads `pipe` on a dedicated thread until end of file.
        func drain(_ pipe: Pipe) {
            readToEnd(pipe, from: ()) { [self] _, bytes in
                state.withLock { state in
                    guard state.keeping else { return }
                    state.tail.append(contentsOf: bytes)
                    if state.tail.count > Self.kept { state.tail.removeFirst(state.tail.count - Self.kept) }
                }
            } end: { [self] _ in
                finished.signal()
            }
        }

        /// Stops keeping what arrives and forgets what was kept.
        func stopKeeping() {
            state.withLock { state in
                state.keeping = false
                state.tail = []
            }
        }

        /// What was kept, once the script's standard error has ended or `limit` has passed.
        func wait(upTo limit: Duration) -> String {
            _ = finished.wait(timeout: .now() + limit.seconds)
            let tail = state.withLock { $0.tail }
            return String(decoding: tail, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }
}

/// Reads `pipe` to its end on a dedicated thread, never on the cooperative pool: each chunk read goes to `consume`
/// with `state`, and `end` gets the state at end of file.
private func readToEnd<State: Sendable>(
    _ pipe: Pipe, from state: State, consume: @escaping @Sendable (inout State, ArraySlice<UInt8>) -> Void,
    end: @escaping @Sendable (inout State) -> Void
) {
    let descriptor = pipe.fileHandleForReading.fileDescriptor
    Thread {
        var state = state
        var chunk = [UInt8](repeating: 0, count: 1_024)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { break }
            consume(&state, chunk[0..<count])
        }
        end(&state)
    }.start()
}

extension Duration {
    /// The duration in seconds, for dispatch's deadlines.
    fileprivate var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
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

    /// Sends `signal` to the process if it is still running.
    func signal(_ signal: Int32) {
        if process.isRunning { _ = kill(process.processIdentifier, signal) }
    }

    /// Sends the process `signal` and waits for it to exit (on a dispatch thread, not the cooperative pool), killing
    /// it if it is still running after `grace`.
    func stop(sending signal: Int32 = SIGTERM, after grace: Duration) async {
        self.signal(signal)
        await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                if !self.waitForExit(upTo: grace) {
                    self.signal(SIGKILL)
                    _ = self.waitForExit(upTo: .seconds(10))
                }
                continuation.resumeVisibly()
            }
        }
    }

    /// Blocks the calling thread until the process has exited or `limit` has passed; returns whether it exited.
    ///
    /// Polls `isRunning` rather than calling `waitUntilExit()`, which waits without a limit in a run loop: a fixture
    /// that will not die must fail its test, not hang the suite.
    func waitForExit(upTo limit: Duration) -> Bool {
        let deadline = DispatchTime.now() + limit.seconds
        while process.isRunning {
            guard DispatchTime.now() < deadline else { return false }
            usleep(10_000)
        }
        return true
    }

    /// How the process ended, or that it has not.
    var exitDescription: String {
        guard !process.isRunning else { return "still running" }
        switch process.terminationReason {
        case .uncaughtSignal: return "ended by signal \(process.terminationStatus)"
        case .exit: return "exit status \(process.terminationStatus)"
        @unknown default: return "ended (status \(process.terminationStatus))"
        }
    }
}
