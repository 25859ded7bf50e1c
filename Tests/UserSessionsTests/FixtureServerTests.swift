import Foundation
import Testing
import UserSessionsTestSupport

/// How the test support's fixture server reports and recovers from a script that does not start.
@Suite struct FixtureServerTests {
    /// A folder holding `scripts` (file name to python source), removed after `body`.
    private func withScripts<R>(_ scripts: [String: String], _ body: (URL) async throws -> R) async throws -> R {
        let directory = FileManager.default.temporaryDirectory.appending(path: "fixture-server-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        for (name, source) in scripts {
            try Data(source.utf8).write(to: directory.appending(path: name))
        }
        return try await body(directory)
    }

    /// The description of the `FixtureServerError` that `start` throws; a start that succeeds fails the test.
    private static func failure(_ start: () async throws -> FixtureServer) async throws -> String {
        do {
            let server = try await start()
            await server.stop()
            Issue.record("the script started")
            return ""
        } catch let error as FixtureServerError {
            return error.description
        }
    }

    /// Prints a bound port and serves until its standard input ends.
    private static let serves = """
        import socket, sys
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        print(listener.getsockname()[1], flush=True)
        sys.stdin.read()

        """

    @Test func aScriptThatExitsBeforeItsPortIsReportedWithItsStatusAndItsLastWords() async throws {
        let exits = "import sys\nsys.stderr.write('no keys today\\n')\nsys.exit(3)\n"
        let failure = try await withScripts(["exits.py": exits]) { directory in
            try await Self.failure { try await FixtureServer.start(script: "exits.py", in: directory, attempts: 2) }
        }
        #expect(failure.contains("exits.py start 1 of 2 failed: ended before printing its port; exit status 3"))
        #expect(failure.contains("exits.py start 2 of 2 failed"))
        #expect(failure.contains("no keys today"))
    }

    @Test func aScriptThatHangsIsAbortedForItsStack() async throws {
        // Three seconds: long enough for python to reach `stuck()` on a loaded machine, so the stack shows it.
        let hangs = "import time\n\ndef stuck():\n    time.sleep(600)\n\nstuck()\n"
        let failure = try await withScripts(["hangs.py": hangs]) { directory in
            try await Self.failure {
                try await FixtureServer.start(script: "hangs.py", in: directory, timeout: .seconds(3), attempts: 1)
            }
        }
        #expect(failure.contains("hangs.py start 1 of 1 failed: printed no port within 3.0 seconds"))
        #expect(failure.contains("ended by signal \(SIGABRT)"))
        #expect(failure.contains("in stuck"), "python's fault handler wrote where it hung")
    }

    @Test func aScriptThatFailsItsFirstStartIsStartedAgain() async throws {
        // The first start finds no marker, writes it and exits; the second finds it and serves.
        let flaky = """
            import os, sys
            marker = sys.argv[1]
            if not os.path.exists(marker):
                open(marker, "w").close()
                sys.exit(1)

            """ + Self.serves
        try await withScripts(["flaky.py": flaky]) { directory in
            let marker = directory.appending(path: "started-once").path(percentEncoded: false)
            let server = try await FixtureServer.start(
                script: "flaky.py", in: directory, arguments: [marker], attempts: 2)
            #expect(server.port > 0)
            #expect(FileManager.default.fileExists(atPath: marker))
            await server.stop()
        }
    }

    @Test func aScriptThatPrintsSomethingElseIsNotTakenForAServer() async throws {
        let chatty = "print('hello', flush=True)\nimport sys\nsys.stdin.read()\n"
        let failure = try await withScripts(["chatty.py": chatty]) { directory in
            try await Self.failure { try await FixtureServer.start(script: "chatty.py", in: directory, attempts: 1) }
        }
        #expect(failure.contains("chatty.py start 1 of 1 failed: printed \"hello\" instead of a port"))
    }
}
