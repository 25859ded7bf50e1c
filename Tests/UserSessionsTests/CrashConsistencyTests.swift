import Dispatch
import Foundation
import Testing

@testable import UserSessions

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Kills a process that saves to a ``FileTokenStore`` in a loop (the `FileStoreCrashWriter` executable) with SIGKILL
/// at random moments, and checks after every kill that the store reads back a complete value: the last acknowledged
/// write or the one in flight, never a torn, empty or corrupt file, and never an older one.
///
/// The number of kills is `USER_SESSIONS_CRASH_KILLS` (default 50, a few seconds); the random schedule can be
/// replayed with `USER_SESSIONS_CRASH_SEED`. The long runs recorded in RELIABILITY.md use thousands of kills.
///
/// Between kills the test ages every temporary file a killed writer left (as if the process had been down for an
/// hour), and checks that the next writer's first save swept them all while a fresh one (another writer's, as far
/// as the store can tell) was kept: the pile of leftovers stays bounded however many kills there are.
struct CrashConsistencyTests {
    static let identifier = "crash-user@example.com"

    /// What the writer saves as write number `counter`; must stay in step with `Tests/CrashWriter/main.swift`.
    static func expectedSession(counter: UInt64) -> StoredSession {
        StoredSession(
            userInfo: UserInfo(id: identifier, attributes: ["counter": String(counter)]),
            credentials: Credentials(
                accessToken: "access-\(counter)-" + String(repeating: "x", count: Int(counter % 2048)),
                refreshToken: "refresh-\(counter)",
                expiresAt: Date(timeIntervalSince1970: Double(counter)),
                source: .refresh
            )
        )
    }

    /// The counter carried by a stored session's access token.
    static func counter(of session: StoredSession) -> UInt64? {
        guard let token = session.credentials?.accessToken, token.hasPrefix("access-") else { return nil }
        return UInt64(token.dropFirst("access-".count).prefix(while: { $0 != "-" }))
    }

    static var kills: Int {
        ProcessInfo.processInfo.environment["USER_SESSIONS_CRASH_KILLS"].flatMap { Int($0) }.map { max($0, 1) } ?? 50
    }

    @Test func storeReadsOldOrNewCredentialsAfterEverySIGKILL() async throws {
        let writer = try #require(
            CrashWriterProcess.locateExecutable(),
            "FileStoreCrashWriter was not built next to the test bundle; build the whole package (swift build)"
        )
        let root = FileManager.default.temporaryDirectory.appending(path: "crash-consistency-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let directory = root.appending(path: "tokens", directoryHint: .isDirectory)
        let store = FileTokenStore(directory: directory)

        // A temporary file left by an earlier crash, half-written: readers and listings must ignore it, and the
        // first sweep removes it once it is old. And one that looks like a live writer's (kept fresh below): it
        // must survive every sweep.
        try PrivateFiles.makeDirectory(directory.path(percentEncoded: false))
        try Data(#"{"format":"swift-user-sessions.tok"#.utf8).write(to: directory.appending(path: ".tmp-leftover"))
        let live = directory.appending(path: ".tmp-live-writer")
        try Data(#"{"format":"#.utf8).write(to: live)
        var mostTemporaryFiles = 0
        var temporaryFilesSwept = 0

        let seed =
            ProcessInfo.processInfo.environment["USER_SESSIONS_CRASH_SEED"].flatMap { UInt64($0) }
            ?? UInt64.random(in: 1...UInt64.max)
        var random = SplitMix64(seed: seed)
        var durable: UInt64? = nil  // The highest counter acknowledged so far: it must never be lost.
        var nextCounter: UInt64 = 1
        var acknowledgedWrites = 0
        var killsSurvived = 0
        var inFlightWritesSeen = 0

        for round in 0..<Self.kills {
            // Everything a killed writer left is now an hour old; the "live" file was just written to.
            let agedBefore = try Self.ageTemporaryFiles(in: directory, except: live.lastPathComponent)
            try FileManager.default.setAttributes(
                [.modificationDate: Date()], ofItemAtPath: live.path(percentEncoded: false))
            // One round in eight kills without waiting for the writer to get going (during start-up or its first
            // write); the others wait for a first acknowledged write, then up to 10 ms more.
            let waitsForFirstWrite = random.next() % 8 != 0
            let delayMicroseconds = UInt32(random.next() % 10_000)
            let outcome = try await CrashWriterProcess.runAndKill(
                executable: writer,
                arguments: [directory.path(percentEncoded: false), Self.identifier, String(nextCounter)],
                waitForFirstLine: waitsForFirstWrite,
                delayMicroseconds: delayMicroseconds
            )
            let context = "round \(round), seed \(seed), first counter \(nextCounter)"
            #expect(outcome.wasKilled, "the writer exited on its own: \(outcome.status) (\(context))")
            acknowledgedWrites += outcome.acknowledged.count
            if let last = outcome.acknowledged.last { durable = last }

            // A writer that completed a save swept every stale temporary file first; the fresh one stays.
            let temporaryFiles = try Self.temporaryFiles(in: directory)
            mostTemporaryFiles = max(mostTemporaryFiles, temporaryFiles.count)
            #expect(temporaryFiles.contains(live.lastPathComponent), "a fresh temporary file was swept (\(context))")
            if !outcome.acknowledged.isEmpty {
                let staleLeft = agedBefore.intersection(temporaryFiles)
                #expect(staleLeft.isEmpty, "stale temporary files survived a writer's first save (\(context))")
                #expect(temporaryFiles.count <= 2, "\(temporaryFiles.count) temporary files (\(context))")
                temporaryFilesSwept += agedBefore.count
            }

            let loaded: StoredSession?
            do {
                loaded = try await store.load(identifier: Self.identifier)
            } catch {
                Issue.record("load failed after a kill: \(error) (\(context))")
                return
            }
            guard let loaded else {
                // Killed before its first write ever completed: nothing stored is the right answer.
                #expect(durable == nil, "an acknowledged write was lost: the file is gone (\(context))")
                killsSurvived += 1
                continue
            }
            let counter = try #require(
                Self.counter(of: loaded), "the stored access token carries no counter (\(context))")
            // Every field belongs to the same write: nothing torn, nothing mixed.
            #expect(loaded == Self.expectedSession(counter: counter), "a torn or mixed session (\(context))")
            // Never older than the last acknowledged write; at most the one write that was in flight.
            if let durable {
                #expect(counter >= durable, "an acknowledged (or already read) write was lost (\(context))")
            }
            let newestPossible = outcome.acknowledged.last.map { $0 + 1 } ?? nextCounter
            #expect(counter <= newestPossible, "a write that was never made is visible (\(context))")
            if counter == newestPossible, outcome.acknowledged.last != nil { inFlightWritesSeen += 1 }
            #expect(try await store.storedIdentifiers() == [Self.identifier], "\(context)")
            killsSurvived += 1
            // What a reader has seen must never go back either.
            durable = max(counter, durable ?? 0)
            nextCounter = max(counter, durable ?? 0) + 1
        }

        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.path(percentEncoded: false))
            .filter { $0.hasPrefix(PrivateFiles.temporaryPrefix) }.count
        #expect(killsSurvived == Self.kills)
        #expect(leftovers <= 2 + 1, "the pile of temporary files grew to \(leftovers)")
        #expect(acknowledgedWrites > 0, "the writer never completed a write")
        if ProcessInfo.processInfo.environment["USER_SESSIONS_CRASH_KILLS"] != nil {
            print(
                "crash consistency: \(Self.kills) SIGKILLs, \(killsSurvived) survived, \(acknowledgedWrites) "
                    + "acknowledged writes, \(inFlightWritesSeen) in-flight writes found complete, "
                    + "\(leftovers) temporary files left at the end (at most \(mostTemporaryFiles) at once; "
                    + "\(temporaryFilesSwept) stale ones swept), seed \(seed)"
            )
        }
    }
}

extension CrashConsistencyTests {
    /// The names of the temporary files in `directory`.
    static func temporaryFiles(in directory: URL) throws -> Set<String> {
        Set(
            try FileManager.default.contentsOfDirectory(atPath: directory.path(percentEncoded: false))
                .filter { $0.hasPrefix(PrivateFiles.temporaryPrefix) })
    }

    /// Sets the modification time of every temporary file but `except` to an hour ago; returns their names.
    static func ageTemporaryFiles(in directory: URL, except: String) throws -> Set<String> {
        let aged = try temporaryFiles(in: directory).subtracting([except])
        for name in aged {
            try? FileManager.default.setAttributes(
                [.modificationDate: Date(timeIntervalSinceNow: -3600)],
                ofItemAtPath: directory.appending(path: name).path(percentEncoded: false))
        }
        return aged
    }

    /// The sweep rule on its own: the first call on a store instance removes `.tmp-` regular files older than five
    /// minutes, and nothing else; later calls on that instance do not sweep again.
    @Test func theFirstCallOfAStoreSweepsOnlyStaleTemporaryFiles() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "sweep-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let writer = FileTokenStore(directory: directory)
        let session = StoredSession(userInfo: UserInfo(id: "u"), credentials: Credentials(accessToken: "a"))
        try await writer.save(session, identifier: "u")
        func make(_ name: String, age: TimeInterval, directory isDirectory: Bool = false) throws {
            let url = directory.appending(path: name)
            if isDirectory {
                try FileManager.default.createDirectory(at: url, withIntermediateDirectories: false)
            } else {
                try Data("partial".utf8).write(to: url)
            }
            try FileManager.default.setAttributes(
                [.modificationDate: Date(timeIntervalSinceNow: -age)], ofItemAtPath: url.path(percentEncoded: false))
        }
        try make(".tmp-stale", age: 3600)
        try make(".tmp-just-stale", age: 400)
        try make(".tmp-recent", age: 120)  // younger than five minutes: maybe a live writer's
        try make(".tmp-future", age: -3600)  // the clock went back: not known to be stale
        try make(".tmp-a-directory", age: 3600, directory: true)
        try make("unrelated-stale-file", age: 3600)
        try FileManager.default.createSymbolicLink(
            atPath: directory.appending(path: ".tmp-link").path(percentEncoded: false), withDestinationPath: "/")
        let names = { try Set(FileManager.default.contentsOfDirectory(atPath: directory.path(percentEncoded: false))) }
        // The writer's store already made its first call (before these files existed): it does not sweep again.
        _ = try await writer.load(identifier: "u")
        #expect(try names().isSuperset(of: [".tmp-stale", ".tmp-just-stale"]))

        let reader = FileTokenStore(directory: directory)
        #expect(try await reader.load(identifier: "u") == session)
        let expected: Set<String> = [
            try IdentifierEncoding.name(for: "u").value + ".json", ".tmp-recent", ".tmp-future", ".tmp-a-directory",
            "unrelated-stale-file", ".tmp-link",
        ]
        #expect(try names() == expected)
    }
}

/// Starts the crash writer with `posix_spawn`, reads its acknowledgements, and SIGKILLs it.
enum CrashWriterProcess {
    struct Outcome: Sendable {
        /// The counters the writer acknowledged before it died, in order.
        var acknowledged: [UInt64]
        /// Whether it died of SIGKILL (and not on its own).
        var wasKilled: Bool
        /// The raw wait status, for messages.
        var status: Int32
    }

    struct SpawnError: Error, CustomStringConvertible {
        var description: String
    }

    static let executableName = "FileStoreCrashWriter"

    /// The writer built by SwiftPM next to the test bundle (whatever the scratch path), else in `.build/debug`.
    static func locateExecutable(named executableName: String = executableName) -> URL? {
        locateBuiltExecutable(named: executableName)
    }

    /// Runs one round on a dispatch thread (it blocks in `read`, `usleep` and `waitpid`).
    static func runAndKill(
        executable: URL,
        arguments: [String],
        waitForFirstLine: Bool,
        delayMicroseconds: UInt32
    ) async throws -> Outcome {
        try await withVisibleCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resumeVisibly(
                    with: Result {
                        try runAndKillNow(
                            executable: executable.path(percentEncoded: false),
                            arguments: arguments,
                            waitForFirstLine: waitForFirstLine,
                            delayMicroseconds: delayMicroseconds
                        )
                    }
                )
            }
        }
    }

    private static func runAndKillNow(
        executable: String,
        arguments: [String],
        waitForFirstLine: Bool,
        delayMicroseconds: UInt32
    ) throws -> Outcome {
        var descriptors: [Int32] = [-1, -1]
        guard pipe(&descriptors) == 0 else { throw SpawnError(description: "pipe failed: errno \(errno)") }
        let (readEnd, writeEnd) = (descriptors[0], descriptors[1])
        // Other tests spawn processes concurrently; they must not inherit our pipe (or our reads never see EOF).
        _ = fcntl(readEnd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(writeEnd, F_SETFD, FD_CLOEXEC)
        defer { _ = close(readEnd) }

        #if canImport(Darwin)
        var actions: posix_spawn_file_actions_t? = nil
        #else
        var actions = posix_spawn_file_actions_t()
        #endif
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, writeEnd, STDOUT_FILENO)

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let environment: [UnsafeMutablePointer<CChar>?] = [nil]
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environment)
        _ = close(writeEnd)
        guard spawned == 0 else { throw SpawnError(description: "posix_spawn failed: \(spawned)") }

        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        func readSome() -> Bool {
            let count = buffer.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { return true }
            guard count > 0 else { return false }
            output.append(contentsOf: buffer[0..<count])
            return true
        }
        if waitForFirstLine {
            while !output.contains(UInt8(ascii: "\n")), readSome() {}
        }
        if delayMicroseconds > 0 { usleep(delayMicroseconds) }
        _ = kill(pid, SIGKILL)
        // Everything the writer wrote before it died is still in the pipe.
        while readSome() {}
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}

        let lines = String(decoding: output, as: UTF8.self).split(separator: "\n")
        // A line cut by the kill cannot be one: each acknowledgement is a single write(2) of the whole line.
        let acknowledged = lines.compactMap { UInt64($0) }
        let terminatedBySignal = status & 0x7F != 0 && status & 0x7F != 0x7F
        return Outcome(
            acknowledged: acknowledged, wasKilled: terminatedBySignal && status & 0x7F == SIGKILL, status: status)
    }
}
