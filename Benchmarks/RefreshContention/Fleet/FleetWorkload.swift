import Foundation
import UserSessions
import UserSessionsTestSupport

/// Workload G: a fleet of K processes sharing one user through one ``CoordinatedTokenStore``.
///
/// For each store (`file`: a ``FileTokenStore`` directory; `postgres`: a `PostgresTokenStore`, with the PostgreSQL
/// trait and `USER_SESSIONS_POSTGRES_URL`) and each K, this executable starts K copies of itself in node mode
/// (``FleetNode``), all against one OAuth fixture server (`oauth_server.py` on 127.0.0.1: refresh tokens rotate on
/// every use, and a reused one revokes the family and counts a reuse detection) issuing tokens that live 200 ms.
/// Each node runs 64 tasks calling `accessToken()` for a few seconds. The refresh gate takes the store's
/// fleet-wide lease around a refresh, adopts a rotation another node committed, and commits conditionally, so the
/// fleet as a whole must refresh exactly once per expiry: the server's refreshes equal the tokens that expired
/// (distinct tokens handed out, plus the one left in the store, minus one), with no reuse detected.
///
/// Beside it, the hot path over each store: ns per `accessToken()` on an open session, and the store calls made
/// meanwhile (none: an open session never reads the store while its token is valid).
struct FleetWorkload {
    let plan: BenchmarkPlan

    struct Sample {
        var kind: String
        var nodes: Int
        var tasks: Int
        var seconds: Double
        var serverRefreshes: Int
        var nodeRefreshes: Int
        var adopted: Int
        var expiries: Int
        var reuseDetected: Int
        var invalidGrant: Int
        var calls: Int
        var errors: Int
        var firstError: String?
        var refreshMilliseconds: [Double]
        var adoptMilliseconds: [Double]
        var callP50Milliseconds: Double
        var callP99Milliseconds: Double
        var callMaxMilliseconds: Double
    }

    struct HotSample {
        var kind: String
        var calls: Int
        var nsPerCall: Double
        var storeCalls: Int
        /// The store methods called meanwhile, in order.
        var storeMethods: [String]
    }

    struct Outcome {
        var samples: [Sample] = []
        var hot: [HotSample] = []
        var skipped: [String] = []
        var failures: [String] = []
    }

    static let identifier = "fleet-user"

    /// The progress weight: one unit per node started, and one per hot-path row.
    static func weight(_ plan: BenchmarkPlan) -> Double {
        let kinds = FleetStore.kinds.filter { $0.skipped == nil }.count
        return Double(kinds * (plan.fleetNodes.reduce(0, +) + 1))
    }

    func run(progress: ProgressLine) async -> Outcome {
        var outcome = Outcome()
        let server: OAuthFixtureServer
        do {
            server = try await OAuthFixtureServer.start()
            try await server.configure(["expires_in": plan.fleetTokenLifetime.inSeconds])
        } catch {
            outcome.failures.append("fleet: could not start the OAuth fixture server: \(error)")
            return outcome
        }
        let run = ProcessInfo.processInfo.processIdentifier
        for (kind, skipped) in FleetStore.kinds {
            if let skipped {
                outcome.skipped.append("fleet: \(kind) rows skipped: \(skipped)")
                continue
            }
            for nodes in plan.fleetNodes {
                let specification: String
                if kind == "file" {
                    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                        "fleet-\(run)-\(nodes)-\(UUID().uuidString)", isDirectory: true)
                    specification = "file:\(directory.path)"
                } else {
                    specification = "postgres:fleet-\(run)-\(nodes)"
                }
                do {
                    let sample = try await withDeadline(plan.runLimit) {
                        try await runFleet(kind: kind, specification: specification, nodes: nodes, server: server)
                    }
                    outcome.samples.append(sample)
                } catch {
                    outcome.failures.append("fleet \(kind) K=\(nodes): \(error)")
                }
                if kind == "file" { try? FileManager.default.removeItem(atPath: String(specification.dropFirst(5))) }
                progress.advance(by: Double(nodes), detail: "\(kind) K=\(nodes)")
            }
            do {
                let specification =
                    kind == "file"
                    ? "file:"
                        + FileManager.default.temporaryDirectory.appendingPathComponent(
                            "fleet-hot-\(run)-\(UUID().uuidString)"
                        ).path : "postgres:fleet-hot-\(run)"
                outcome.hot.append(
                    try await hotPath(kind: kind, specification: specification, server: server))
                if kind == "file" { try? FileManager.default.removeItem(atPath: String(specification.dropFirst(5))) }
            } catch {
                outcome.failures.append("fleet hot path \(kind): \(error)")
            }
            progress.advance(by: 1, detail: "\(kind) hot path")
        }
        await server.stop()
        return outcome
    }

    /// One fleet of `nodes` processes over the store `specification`.
    func runFleet(kind: String, specification: String, nodes: Int, server: OAuthFixtureServer) async throws -> Sample {
        let family = try await server.issue()
        // Every node waits for the same moment; the first token expires one lifetime after it.
        let start = Date().addingTimeInterval(1.5)
        let lifetime = plan.fleetTokenLifetime.inSeconds
        try await FleetStore.with(specification) { store in
            try await store.save(
                StoredSession(
                    userInfo: UserInfo(id: Self.identifier),
                    credentials: Credentials(
                        accessToken: family.accessToken, refreshToken: family.refreshToken,
                        expiresAt: start.addingTimeInterval(lifetime), lastRefreshedAt: start)),
                identifier: Self.identifier)
        }
        let before = try await server.stats()
        let seconds = plan.fleetDuration.inSeconds
        let arguments = [
            FleetNode.flag, specification, Self.identifier, server.tokenEndpoint.absoluteString,
            "\(plan.fleetTasks)", "\(start.timeIntervalSince1970)", "\(seconds)",
        ]
        let summaries = try await withThrowingTaskGroup(of: FleetNodeSummary.self) { group in
            for _ in 0..<nodes {
                group.addTask { try await Self.runNode(arguments) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let after = try await server.stats()
        let final = try await FleetStore.with(specification) { store in
            try await store.loadRevised(identifier: Self.identifier)?.session.credentials?.accessToken
        }
        var tokens = Set(summaries.flatMap(\.tokens))
        if let final { tokens.insert(FleetToken.hash(final)) }
        return Sample(
            kind: kind, nodes: nodes, tasks: plan.fleetTasks, seconds: seconds,
            serverRefreshes: after.refreshes - before.refreshes,
            nodeRefreshes: summaries.map(\.refreshes).reduce(0, +), adopted: summaries.map(\.adopted).reduce(0, +),
            expiries: max(tokens.count - 1, 0), reuseDetected: after.reuseDetected - before.reuseDetected,
            invalidGrant: after.invalidGrant - before.invalidGrant, calls: summaries.map(\.calls).reduce(0, +),
            errors: summaries.map(\.errors).reduce(0, +), firstError: summaries.compactMap(\.lastError).first,
            refreshMilliseconds: summaries.flatMap(\.refreshMilliseconds).sorted(),
            adoptMilliseconds: summaries.flatMap(\.adoptMilliseconds).sorted(),
            callP50Milliseconds: summaries.map(\.callP50Milliseconds).max() ?? 0,
            callP99Milliseconds: summaries.map(\.callP99Milliseconds).max() ?? 0,
            callMaxMilliseconds: summaries.map(\.callMaxMilliseconds).max() ?? 0)
    }

    /// Runs this executable in node mode and decodes the summary it prints.
    static func runNode(_ arguments: [String]) async throws -> FleetNodeSummary {
        let (data, status) = try await runToEnd(benchmarkExecutable, arguments, cpu: nil)
        guard status == 0 else { throw BenchmarkError("a node exited with status \(status)") }
        do {
            return try JSONDecoder().decode(FleetNodeSummary.self, from: data)
        } catch {
            throw BenchmarkError("a node printed no summary: \(error)")
        }
    }

    /// `accessToken()` on an open session over the store, and the store calls made while it runs.
    func hotPath(kind: String, specification: String, server: OAuthFixtureServer) async throws -> HotSample {
        let calls = plan.fleetHotPathCalls
        // Stored through a store of its own, closed before the measured one opens: its change notification is
        // not one that the measured session would receive and read the store for.
        try await FleetStore.with(specification) { store in
            try await store.save(
                StoredSession(
                    userInfo: UserInfo(id: Self.identifier),
                    credentials: Credentials(
                        accessToken: "hot-path-token", refreshToken: "hot-path-refresh",
                        expiresAt: Date().addingTimeInterval(3600))),
                identifier: Self.identifier)
        }
        return try await FleetStore.with(specification) { store in
            let counting = CallCountingStore(store)
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"))
            let controller = UserSessionController(
                store: counting, refresher: refresher, configuration: FleetNode.configuration)
            guard try await controller.restore(identifier: Self.identifier) != nil else {
                throw BenchmarkError("nothing to restore")
            }
            _ = try await controller.accessToken()
            // The session subscribes to the store's changes when it opens; PostgreSQL's listener connects in the
            // background and then has the session read the record once (it may have missed a change meanwhile).
            // Let that happen before the measured calls, which must not touch the store.
            try await Task.sleep(for: .milliseconds(500))
            let storeCallsBefore = counting.calls
            let clock = ContinuousClock()
            let began = clock.now
            for _ in 0..<calls {
                _ = try await controller.accessToken()
            }
            let wall = clock.now - began
            let storeCalls = counting.calls - storeCallsBefore
            let storeMethods = counting.called(after: storeCallsBefore)
            await controller.close()
            await controller.shutdown()
            return HotSample(
                kind: kind, calls: calls, nsPerCall: wall.inNanoseconds / Double(calls), storeCalls: storeCalls,
                storeMethods: storeMethods)
        }
    }
}
