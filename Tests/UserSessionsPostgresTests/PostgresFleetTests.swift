#if PostgreSQL
import Foundation
import PostgresNIO
import Testing
import UserSessions
import UserSessionsPostgres
import UserSessionsTestSupport

#if OpenIDConnect
import UserSessionsOpenIDConnect
#endif

/// Several real processes (the `FleetNode` executable, built with the PostgreSQL trait) sharing one user through one
/// PostgreSQL database, each with a `PostgresClient` of its own, against the OAuth fixture server with refresh-token
/// rotation and reuse detection on. Serialized: the lease test looks at every advisory lock of the database.
///
/// The nodes use the database's default schema and a namespace of the test's own, so tests never see each other.
@Suite(.serialized, .enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.skipMessage))
struct PostgresFleetTests {
    static let expiries = 5
    static let identifier = "fleet-user"

    static func executable() throws -> URL {
        try #require(
            locateBuiltExecutable(named: "FleetNode"),
            "FleetNode was not built next to the test bundle; build the whole package with the PostgreSQL trait")
    }

    /// `--store` for the nodes: the test's server and `namespace`.
    static func storeArgument(namespace: String) throws -> String {
        let url = try #require(ProcessInfo.processInfo.environment["USER_SESSIONS_POSTGRES_URL"])
        return "postgres:\(url)#\(namespace)"
    }

    /// Runs `body` with a store of `namespace` (default schema) holding `credentials` for ``identifier``.
    static func withSeededStore<Value: Sendable>(
        namespace: String, _ credentials: Credentials,
        _ body: (PostgresTokenStore, PostgresClient) async throws -> Value
    ) async throws -> Value {
        try await PostgresTestServer.withClient(schema: nil) { client in
            let store = try PostgresTokenStore(
                client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout)
            try await store.prepare()
            try await store.save(
                StoredSession(userInfo: UserInfo(id: identifier), credentials: credentials), identifier: identifier)
            return try await body(store, client)
        }
    }

    /// Determinism as in `FleetTests`: tokens live 1 s, and after `expiries` refreshes the fixture issues one that
    /// lives an hour; every node runs until it holds that one. More refreshes than expiries would need two nodes
    /// presenting one refresh token (a reuse detection too); fewer, a node that stopped early.
    @Test func fourProcessesSharingPostgreSQLRefreshOncePerExpiry() async throws {
        let executable = try Self.executable()
        let namespace = PostgresTestServer.uniqueNamespace()
        try await OAuthFixtureServer.with { server in
            try await server.configure(["expires_in": 1, "final_after": Self.expiries, "final_expires_in": 3600])
            let family = try await server.issue()
            let credentials = Credentials(
                accessToken: family.accessToken, refreshToken: family.refreshToken,
                expiresAt: Date().addingTimeInterval(1))
            try await Self.withSeededStore(namespace: namespace, credentials) { store, _ in
                let arguments = [
                    "--store", try Self.storeArgument(namespace: namespace), "--identifier", Self.identifier,
                    "--token-endpoint", server.tokenEndpoint.absoluteString, "--tasks", "100",
                    "--until-lifetime-over", "600", "--time-limit", "60", "--stop-on-error",
                ]
                let nodes = try await Self.runFourNodes(executable, arguments)
                let stats = try await server.stats()
                let adopted = nodes.map { $0.summary["adopted"] as? Int ?? 0 }.reduce(0, +)
                let stored = try await store.load(identifier: Self.identifier)
                // The fleet refreshes exactly once per expiry and never presents a spent refresh token (before the
                // fix of a flight superseded by a notification mid-read, a node did, and the family was revoked).
                for node in nodes {
                    #expect(node.status == 0, "\(node.summaryLine)")
                    #expect(node.summary["errors"] as? Int == 0, "\(node.summaryLine)")
                    #expect(node.summary["settled"] as? Bool == true, "\(node.summaryLine)")
                }
                #expect(stats.refreshes == Self.expiries)
                #expect(stats.reuseDetected == 0)
                #expect(stats.invalidGrant == 0)
                let hashes = Set(nodes.map { $0.summary["final_token_hash"] as? String ?? "?" })
                #expect(hashes.count == 1, "every process ends on the same token: \(hashes)")
                let refreshes = nodes.map { $0.summary["refreshes"] as? Int ?? -1 }.reduce(0, +)
                #expect(refreshes == Self.expiries, "refreshes made by the nodes")
                // The row holds the last token the fleet got.
                #expect(stored?.credentials.map { shortHash($0.accessToken) } == hashes.first)
                print(
                    "fleet (PostgreSQL, 4 processes × 100 tasks): \(stats.refreshes) refreshes for \(Self.expiries) "
                        + "expiries, \(stats.reuseDetected) reuse detections, \(stats.invalidGrant) invalid_grant, "
                        + "\(adopted) adoptions from the store; nodes: \(nodes.map(\.summaryLine))")
            }
        }
    }

    #if OpenIDConnect
    /// The same fleet with the user's tokens bound by DPoP (issue 27): the key was made at sign-in and stored beside
    /// the credentials; whichever process wins an expiry signs its proof with that stored key, so the fixture (which
    /// verifies every proof and binds the family to its first key) sees one key for every refresh, one refresh per
    /// expiry, and refuses nothing.
    @Test func fourProcessesSharingADPoPBoundUserRefreshOncePerExpiryWithTheStoredKey() async throws {
        let executable = try Self.executable()
        let namespace = PostgresTestServer.uniqueNamespace()
        try await OAuthFixtureServer.with { server in
            try await server.configure(["expires_in": 1, "final_after": Self.expiries, "final_expires_in": 3600])
            let family = try await server.issue()
            let signer = DPoPSigner()
            let key = try signer.makeKey(.es256)
            let credentials = Credentials(
                accessToken: family.accessToken, refreshToken: family.refreshToken, tokenType: "DPoP",
                expiresAt: Date().addingTimeInterval(1), dpopKey: key)
            try await Self.withSeededStore(namespace: namespace, credentials) { store, _ in
                let arguments = [
                    "--store", try Self.storeArgument(namespace: namespace), "--identifier", Self.identifier,
                    "--token-endpoint", server.tokenEndpoint.absoluteString, "--tasks", "100",
                    "--until-lifetime-over", "600", "--time-limit", "60", "--stop-on-error", "--dpop",
                ]
                let nodes = try await Self.runFourNodes(executable, arguments)
                let stats = try await server.stats()
                for node in nodes {
                    #expect(node.status == 0, "\(node.summaryLine)")
                    #expect(node.summary["errors"] as? Int == 0, "\(node.summaryLine)")
                }
                #expect(stats.refreshes == Self.expiries)
                #expect(stats.reuseDetected == 0 && stats.invalidGrant == 0 && stats.dpopRefused == 0)
                let thumbprint = try signer.thumbprint(of: key)
                #expect(stats.refreshJkts == Array(repeating: thumbprint, count: Self.expiries))
                let stored = try #require(try await store.load(identifier: Self.identifier)?.credentials)
                #expect(stored.dpopKey == key && stored.tokenType == "DPoP", "the key stays beside the tokens")
            }
        }
    }
    #endif

    /// Three processes ask a `ClientCredentialsTokenManager` on one PostgreSQL store for the server's own token: the
    /// store's lease makes the fleet send one grant per expiry (tokens live 1 s, the fixture's fifth grant an hour;
    /// every node runs until it holds that one), and the other instances adopt the stored token.
    @Test func threeProcessesSharingPostgreSQLRequestTheServersOwnTokenOncePerExpiry() async throws {
        let executable = try Self.executable()
        let namespace = PostgresTestServer.uniqueNamespace()
        try await OAuthFixtureServer.with { server in
            try await server.configure(["client_expires_in": 1, "final_after": Self.expiries, "final_expires_in": 3600])
            try await PostgresTestServer.withClient(schema: nil) { client in
                try await PostgresTokenStore(
                    client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout
                ).prepare()
            }
            let arguments = [
                "--client-credentials", "--store", try Self.storeArgument(namespace: namespace), "--identifier",
                "unused", "--token-endpoint", server.tokenEndpoint.absoluteString, "--tasks", "50",
                "--until-lifetime-over", "600", "--time-limit", "60", "--stop-on-error",
            ]
            let nodes = try await NodeProcess.runAll(executable, arguments, names: ["a", "b", "c"])
            let stats = try await server.stats()
            let problems = NodeProcess.clientCredentialsFleetProblems(stats, nodes, expiries: Self.expiries)
            #expect(problems.isEmpty, "\(problems)")
            print(
                "client-credentials fleet (PostgreSQL, 3 processes × 50 tasks): \(stats.clientCredentials) grants for "
                    + "\(Self.expiries) expiries, \(stats.prematureGrants) premature; nodes: \(nodes.map(\.summaryLine))"
            )
        }
    }

    /// Fleet-wide sign-out: four nodes hold the user open; node 1 clears it; nodes 2–4 hear the removal and close
    /// with `.closed(.clearedElsewhere)`. The bound (1 s on loopback) is measured from the wall-clock time node 1
    /// printed when `closeAndClear()` returned to the times the others printed when their event came: a bound, not an
    /// ordering (an event may even come before node 1's call returns).
    @Test func clearingOnOneNodeClosesTheOthersWithinASecond() async throws {
        let executable = try Self.executable()
        let namespace = PostgresTestServer.uniqueNamespace()
        let credentials = Credentials(
            accessToken: "sign-out-access", refreshToken: "sign-out-refresh",
            expiresAt: Date().addingTimeInterval(3600))
        try await Self.withSeededStore(namespace: namespace, credentials) { store, _ in
            let arguments = [
                "--sign-out-mode", "--store", try Self.storeArgument(namespace: namespace), "--identifier",
                Self.identifier, "--time-limit", "60",
            ]
            let nodes = try (1...4).map { try LiveNode(executable, arguments, name: "n\($0)", withInput: $0 == 1) }
            for node in nodes {
                let line = await node.nextLine()
                #expect(line == "open", "\(node.name) said \(line ?? "nothing")")
            }
            try nodes[0].send("clear")
            let cleared = try #require(await nodes[0].nextLine())
            let clearedAt = try #require(Self.time(in: cleared, after: "cleared"), "node 1 said \(cleared)")
            var lags: [Double] = []
            for node in nodes.dropFirst() {
                let line = await node.nextLine() ?? ""
                let closedAt = try #require(
                    Self.time(in: line, after: "closed-elsewhere"), "\(node.name) said \(line)")
                lags.append(closedAt - clearedAt)
            }
            for node in nodes {
                let (status, _) = await node.exit()
                #expect(status == 0, "\(node.name) exited with \(status)")
            }
            for lag in lags { #expect(lag < 1.0, "closed \(lag) s after node 1's clear returned") }
            #expect(try await store.load(identifier: Self.identifier) == nil)
            print(
                "fleet sign-out (PostgreSQL, 4 processes): nodes 2–4 closed with .clearedElsewhere "
                    + lags.map { String(format: "%+.3f s", $0) }.joined(separator: ", ")
                    + " from node 1's closeAndClear() returning")
        }
    }

    /// The one loss no client can prevent. Node A holds the lease and has sent its refresh request; the fixture holds
    /// every answer for 3 s. The test waits until the fixture has A's request (so the server will rotate), starts
    /// nodes B–D (they block on the lease), and SIGKILLs A. PostgreSQL releases A's advisory lock when its
    /// connection drops, so B–D carry on at once (well within the 30 s lease deadline) - but the row still holds the
    /// refresh token A spent: the server rotated it for a process that died before writing the new one. The next node
    /// presents the spent token, the fixture detects the reuse and revokes the family, and every node ends with the
    /// session refused (the user must sign in again). What the survivors must not do is hang or loop: each stops on
    /// a typed error.
    @Test func killingTheLeaseHolderAfterTheServerRotatedLosesTheFamily() async throws {
        let executable = try Self.executable()
        let namespace = PostgresTestServer.uniqueNamespace()
        try await OAuthFixtureServer.with { server in
            try await server.configure(["expires_in": 3600])
            let family = try await server.issue()
            let credentials = Credentials(
                accessToken: family.accessToken, refreshToken: family.refreshToken,
                expiresAt: Date().addingTimeInterval(-1))
            try await Self.withSeededStore(namespace: namespace, credentials) { store, _ in
                try await server.configure(["delay": 3])
                let arguments = [
                    "--store", try Self.storeArgument(namespace: namespace), "--identifier", Self.identifier,
                    "--token-endpoint", server.tokenEndpoint.absoluteString, "--tasks", "10",
                    "--until-lifetime-over", "600", "--time-limit", "60", "--report-refresh", "--stop-on-error",
                ]
                let holder = try LiveNode(executable, arguments, name: "a")
                let said = await holder.nextLine() ?? ""
                #expect(said.hasPrefix("refreshing "), "the holder said \(said)")
                try await PostgresTestServer.eventually("the fixture has the holder's refresh request") {
                    try await server.stats().tokenRequests == 1
                }
                let survivors = try ["b", "c", "d"].map { try LiveNode(executable, arguments, name: $0) }
                holder.kill()
                let killedAt = Date().timeIntervalSince1970
                let (_, signalled) = await holder.exit()
                #expect(signalled, "the holder died of SIGKILL")
                var outputs: [String: [String]] = [:]
                for node in survivors {
                    outputs[node.name] = await node.remainingLines()
                    _ = await node.exit()
                }
                let stats = try await server.stats()
                let refreshTimes = outputs.values.flatMap { $0 }.compactMap { Self.time(in: $0, after: "refreshing") }
                let firstRefresh = try #require(refreshTimes.min(), "no survivor refreshed: \(outputs)")
                // The survivors carried on long before the lease deadline (30 s): the lock went with the connection.
                #expect(firstRefresh - killedAt < 30)
                // The documented outcome: the dead node's request rotated the family at the server; the first survivor
                // presented the spent token and the fixture detected the reuse.
                #expect(stats.refreshes == 1, "the dead node's refresh rotated the token")
                #expect(stats.reuseDetected == 1, "a survivor presented the spent refresh token")
                for (name, lines) in outputs {
                    let summary = NodeProcess(status: 1, summaryLine: lines.last ?? "").summary
                    #expect(summary["settled"] as? Bool == false, "\(name): \(lines)")
                    #expect(summary["stopped"] as? Bool == true, "\(name) stops on a typed error: \(lines)")
                    #expect((summary["errors"] as? Int ?? 0) > 0, "\(name): \(lines)")
                }
                // The row still holds the credentials the dead node spent: nothing newer was ever written.
                let stored = try await store.load(identifier: Self.identifier)
                #expect(stored?.credentials?.refreshToken == family.refreshToken)
                for lines in outputs.values {
                    #expect(!lines.joined().contains(family.refreshToken), "no node prints the refresh token")
                }
                let errors = outputs.mapValues { lines in
                    NodeProcess(status: 1, summaryLine: lines.last ?? "").summary["last_error"] as? String ?? "?"
                }
                print(
                    "lease holder killed mid-refresh (PostgreSQL): survivors refreshed "
                        + String(format: "%.3f s", firstRefresh - killedAt) + " after the kill; fixture: "
                        + "\(stats.tokenRequests) token requests, \(stats.refreshes) rotation (the dead node's), "
                        + "\(stats.reuseDetected) reuse detection, \(stats.invalidGrant) invalid_grant; "
                        + "survivors ended with: \(errors.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" })")
            }
        }
    }

    /// Runs four nodes named `a` to `d` with `arguments` at once, each to its end.
    static func runFourNodes(_ executable: URL, _ arguments: [String]) async throws -> [NodeProcess] {
        try await withThrowingTaskGroup(of: NodeProcess.self) { group in
            for name in ["a", "b", "c", "d"] {
                group.addTask { try await NodeProcess.run(executable, arguments + ["--name", name]) }
            }
            var nodes: [NodeProcess] = []
            for try await node in group { nodes.append(node) }
            return nodes
        }
    }

    /// The wall-clock time in a line `PREFIX UNIXTIME`.
    static func time(in line: String, after prefix: String) -> Double? {
        let parts = line.split(separator: " ")
        guard parts.count == 2, parts[0] == prefix else { return nil }
        return Double(parts[1])
    }
}

/// The hash FleetNode prints for a token (FNV-1a, 64 bits, first 12 hex digits).
func shortHash(_ token: String) -> String {
    String(StableHash64(token).hexDigits.suffix(12))
}
#endif
