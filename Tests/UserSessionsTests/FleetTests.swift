import Foundation
import Testing
import UserSessionsTestSupport

@testable import UserSessions

/// Several real processes (the `FleetNode` executable) sharing one user through one ``FileTokenStore`` directory,
/// against the OAuth fixture server with refresh-token rotation and reuse detection on.
///
/// Determinism: tokens live 1 s, and once the fixture has answered `expiries` refreshes it issues tokens that live
/// an hour. Every node runs until it holds that long-lived token. So the fixture can count no more than `expiries`
/// refreshes unless two processes presented the same refresh token (which it would also count as a reuse
/// detection), and no fewer unless a node stopped early; and every node must end on the same token.
@Suite struct FleetTests {
    static let expiries = 5

    @Test func twoProcessesSharingAFileStoreRefreshOncePerExpiry() async throws {
        let (stats, nodes) = try await Self.runFleet(storeKind: "file")
        for node in nodes {
            #expect(node.status == 0, "\(node.summary)")
            #expect(node.summary["errors"] as? Int == 0, "\(node.summary)")
            #expect(node.summary["settled"] as? Bool == true, "\(node.summary)")
        }
        #expect(stats.refreshes == Self.expiries)
        #expect(stats.reuseDetected == 0)
        #expect(stats.invalidGrant == 0)
        let hashes = Set(nodes.map { $0.summary["final_token_hash"] as? String ?? "?" })
        #expect(hashes.count == 1, "every process ends on the same token: \(hashes)")
        let refreshes = nodes.map { $0.summary["refreshes"] as? Int ?? -1 }.reduce(0, +)
        #expect(refreshes == Self.expiries, "refreshes made by the nodes")
        let adopted = nodes.map { $0.summary["adopted"] as? Int ?? 0 }.reduce(0, +)
        print(
            "fleet (file store, 2 processes × 100 tasks): \(stats.refreshes) refreshes for \(Self.expiries) expiries, "
                + "\(stats.reuseDetected) reuse detections, \(adopted) adoptions from the store")
    }

    /// Three processes ask a `ClientCredentialsTokenManager` on one coordinated file store for the server's own token:
    /// tokens live 1 s, and the fixture's fifth grant lives an hour; every node runs until it holds that one. The
    /// fleet sends one grant per expiry: five in all, none while the last token still had half its life left, the
    /// other nodes adopting the stored token.
    @Test func threeProcessesSharingAFileStoreRequestTheServersOwnTokenOncePerExpiry() async throws {
        let executable = try #require(
            locateBuiltExecutable(named: "FleetNode"),
            "FleetNode was not built next to the test bundle; build the whole package (swift build)")
        let directory = FileManager.default.temporaryDirectory.appending(
            path: "user-sessions-cc-fleet-\(UUID().uuidString)", directoryHint: .isDirectory)
        defer { try? FileManager.default.removeItem(at: directory) }
        try await OAuthFixtureServer.with { server in
            try await server.configure(["client_expires_in": 1, "final_after": Self.expiries, "final_expires_in": 3600])
            let arguments = [
                "--client-credentials", "--store", "file:" + directory.path(percentEncoded: false),
                "--identifier", "unused", "--token-endpoint", server.tokenEndpoint.absoluteString, "--tasks", "50",
                "--until-lifetime-over", "600", "--time-limit", "60", "--stop-on-error",
            ]
            let nodes = try await NodeProcess.runAll(executable, arguments, names: ["a", "b", "c"])
            let stats = try await server.stats()
            let problems = NodeProcess.clientCredentialsFleetProblems(stats, nodes, expiries: Self.expiries)
            #expect(problems.isEmpty, "\(problems)")
            print("client-credentials fleet (file store, 3 processes): \(nodes.map(\.summaryLine))")
        }
    }

    /// The control, behind `USER_SESSIONS_FLEET_CONTROL=1` (its outcome depends on timing, so it asserts nothing
    /// but prints what happened): the same fleet over the same files without coordination.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["USER_SESSIONS_FLEET_CONTROL"] == "1"))
    func theSameFleetWithoutCoordination() async throws {
        let (stats, nodes) = try await Self.runFleet(storeKind: "uncoordinated-file", timeLimit: 20)
        print(
            "fleet control (uncoordinated): \(stats.refreshes) refreshes, \(stats.reuseDetected) reuse detections, "
                + "\(stats.invalidGrant) invalid_grant, nodes: \(nodes.map(\.summaryLine))")
    }

    static func runFleet(storeKind: String, timeLimit: Int = 120) async throws -> (
        OAuthFixtureServer.Stats, [NodeProcess]
    ) {
        let executable = try #require(
            locateBuiltExecutable(named: "FleetNode"),
            "FleetNode was not built next to the test bundle; build the whole package (swift build)")
        let directory = FileManager.default.temporaryDirectory.appending(
            path: "user-sessions-fleet-\(UUID().uuidString)", directoryHint: .isDirectory)
        defer { try? FileManager.default.removeItem(at: directory) }
        return try await OAuthFixtureServer.with { server in
            try await server.configure(["expires_in": 1, "final_after": Self.expiries, "final_expires_in": 3600])
            let family = try await server.issue()
            let store = FileTokenStore(directory: directory)
            try await store.save(
                StoredSession(
                    userInfo: UserInfo(id: "fleet-user"),
                    credentials: Credentials(
                        accessToken: family.accessToken, refreshToken: family.refreshToken,
                        expiresAt: Date().addingTimeInterval(1))),
                identifier: "fleet-user")
            let arguments = [
                "--store", storeKind + ":" + directory.path(percentEncoded: false), "--identifier", "fleet-user",
                "--token-endpoint", server.tokenEndpoint.absoluteString, "--tasks", "100",
                "--until-lifetime-over", "600", "--time-limit", String(timeLimit),
            ]
            async let first = NodeProcess.run(executable, arguments + ["--name", "a"])
            async let second = NodeProcess.run(executable, arguments + ["--name", "b"])
            let nodes = try await [first, second]
            return (try await server.stats(), nodes)
        }
    }
}

/// The file store's lease when its holder dies: the kernel releases a `flock` with the process, so the others take
/// the lease at once, with no deadline to wait out.
@Suite struct FileLeaseHolderDeathTests {
    @Test func aLeaseHolderKilledWithSIGKILLReleasesTheLeaseAtOnce() async throws {
        let executable = try #require(locateBuiltExecutable(named: "FleetNode"))
        let directory = FileManager.default.temporaryDirectory.appending(
            path: "user-sessions-lease-\(UUID().uuidString)", directoryHint: .isDirectory)
        defer { try? FileManager.default.removeItem(at: directory) }
        let process = Process()
        process.executableURL = executable
        process.arguments = [
            "--hold-lease", "--store", "file:" + directory.path(percentEncoded: false), "--identifier", "u",
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = FileHandle.nullDevice
        let exited = AsyncGate()
        process.terminationHandler = { _ in exited.open() }
        try process.run()
        var said = Data()
        while !said.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            said.append(chunk)
        }
        #expect(String(decoding: said, as: UTF8.self) == "holding\n")
        // While the other process holds it, the lease is taken.
        let leasePath = directory.appending(path: try IdentifierEncoding.name(for: "u").value + ".lease")
            .path(percentEncoded: false)
        let probe = try FileLocks.open(leasePath)
        defer { FileLocks.close(probe) }
        #expect(try FileLocks.tryLock(probe, path: leasePath) == false)
        kill(process.processIdentifier, SIGKILL)
        await exited.wait()
        #expect(process.terminationReason == .uncaughtSignal)
        // The kernel released it with the process: free now, without waiting for any deadline.
        #expect(try FileLocks.tryLock(probe, path: leasePath))
    }
}
