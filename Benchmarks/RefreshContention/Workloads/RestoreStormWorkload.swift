import Foundation
import Synchronization
import UserSessions

/// Workload F: a server restarts and N first requests for U stored users arrive at once.
///
/// Each run makes a fresh ``UserSessionRegistry`` over a store that already holds the U users' sessions (tokens
/// valid for an hour), releases N tasks together, and has request `i` call `registry.session(for: "user-(i % U)")`
/// and then `accessToken()` on the controller it got. The store is an ``InMemoryTokenStore`` behind
/// ``CountingTokenStore``, which counts loads; an observer counts the restores (`.opened` events). Get-or-restore is
/// single-flight, so the run must make exactly U loads and U restores (one per user asked for: min(N, U)); anything
/// else breaks the invariant.
///
/// Beside it, in the same shape (N tasks on one start gate, request `i` for user `i % U`, same store):
/// - the floor: a bare dictionary lookup per request plus one store load per user (requests `0..<U` load their
///   user and insert it); no request waits for a load, so it is less than any correct get-or-restore does;
/// - warm: the same N requests again through `session(for:)` and `accessToken()`, every session now open;
/// - hot: `accessToken()` of the already-open controllers only, the hot path at this concurrency;
/// - shutdown: `registry.shutdown()` afterwards, divided by the sessions it closes: what closing (or evicting) an
///   idle open session costs;
/// - the idiom: what a server author writes instead of the registry, an actor keeping
///   `[identifier: Task<UserSessionController, Error>]` whose task makes a controller and restores it from the same
///   store. It keeps the same invariants (one load and one restore per user), so the report shows the registry
///   against the idiom as well as against the floor.
struct RestoreStormWorkload {
    let plan: BenchmarkPlan

    /// One configuration (N requests, U users), one repetition.
    struct Sample {
        var wall: Duration
        var loads: Int
        var restores: Int
        var failedRequests: Int
        var floorWall: Duration
        var floorLoads: Int
        /// Wall time of the warm and hot passes divided by N.
        var warmNsPerRequest: Double
        var hotNsPerCall: Double
        /// Wall time of `registry.shutdown()` divided by the sessions it closed.
        var shutdownNsPerSession: Double
        /// Loads made by the warm and hot passes (open sessions need none).
        var loadsWhileOpen: Int
        var idiomWall: Duration
        var idiomLoads: Int
        var idiomRestores: Int
        var idiomFailedRequests: Int
    }

    struct Configuration: Hashable {
        var requests: Int
        var users: Int
    }

    struct Outcome {
        var samples: [Configuration: [Sample]] = [:]
        var failures: [String] = []
    }

    /// The measured configurations, in report order.
    static func configurations(_ plan: BenchmarkPlan) -> [Configuration] {
        plan.restoreStormRequests.flatMap { requests in
            plan.restoreStormUsers.map { Configuration(requests: requests, users: $0) }
        }
    }

    /// The progress weight of the whole workload: one unit per request and run.
    static func weight(_ plan: BenchmarkPlan) -> Double {
        Double(configurations(plan).map(\.requests).reduce(0, +) * plan.repetitions)
    }

    func run(progress: ProgressLine) async -> Outcome {
        var outcome = Outcome()
        var stores: [Int: InMemoryTokenStore] = [:]
        for users in plan.restoreStormUsers {
            do {
                stores[users] = try await Self.filledStore(users: users)
            } catch {
                outcome.failures.append("restore storm: could not fill the store with \(users) users: \(error)")
            }
        }
        var broken = false
        for repetition in 1...plan.repetitions where !broken {
            for configuration in Self.configurations(plan) {
                guard let store = stores[configuration.users] else { continue }
                do {
                    let sample = try await withDeadline(plan.runLimit) {
                        try await Self.runOnce(configuration, store: store)
                    }
                    outcome.samples[configuration, default: []].append(sample)
                } catch {
                    broken = true
                    outcome.failures.append(
                        "restore storm: N=\(configuration.requests) U=\(configuration.users): \(error)")
                    break
                }
                progress.advance(
                    by: Double(configuration.requests),
                    detail: "N=\(configuration.requests) U=\(configuration.users) #\(repetition)")
            }
        }
        return outcome
    }

    static func identifier(_ user: Int) -> String { "user-\(user)" }
    static func accessToken(_ user: Int) -> String { "access-token-of-user-\(user)" }

    /// A store holding `users` sessions with tokens valid for an hour: what the server stored before it restarted.
    static func filledStore(users: Int) async throws -> InMemoryTokenStore {
        let store = InMemoryTokenStore()
        for user in 0..<users {
            try await store.save(
                StoredSession(
                    userInfo: UserInfo(id: identifier(user)),
                    credentials: Credentials(
                        accessToken: accessToken(user), refreshToken: "refresh-token-of-user-\(user)",
                        expiresAt: .now.addingTimeInterval(3600))),
                identifier: identifier(user))
        }
        return store
    }

    static func runOnce(_ configuration: Configuration, store inner: InMemoryTokenStore) async throws -> Sample {
        let requests = configuration.requests
        let users = configuration.users
        let identifiers = (0..<users).map(identifier)
        let tokens = (0..<users).map(accessToken)

        // The library, right after a restart: a fresh registry, nothing open.
        let (store, restores, settings) = instrumented(inner)
        let registry = UserSessionRegistry(store: store, configuration: settings)
        let (wall, failed) = await measureSessions(requests: requests, identifiers: identifiers, tokens: tokens) {
            try await registry.session(for: $0)
        }
        let loads = store.loads
        let restored = restores.count

        // Every session is open now: the same requests again, then the controllers' hot path alone.
        let (warm, warmFailed) = await measureSessions(requests: requests, identifiers: identifiers, tokens: tokens) {
            try await registry.session(for: $0)
        }
        // Request i is for user i % U, so only the first min(N, U) users were asked for and restored.
        let asked = min(users, requests)
        let controllers = identifiers.prefix(asked).compactMap { registry.existingController(for: $0) }
        guard controllers.count == asked else {
            await registry.shutdown()
            throw BenchmarkError("the registry holds \(controllers.count) of \(asked) restored controllers")
        }
        let (hot, hotFailed) = await measure(requests: requests) { request in
            let user = request % users
            return (try? await controllers[user].accessToken()) == tokens[user]
        }
        let loadsWhileOpen = store.loads - loads
        let shutdownStart = ContinuousClock.now
        await registry.shutdown()
        let shutdown = ContinuousClock.now - shutdownStart

        let (floorWall, floorLoads) = await measureFloor(
            requests: requests, identifiers: identifiers, store: CountingTokenStore(inner))
        let idiom = await measureIdiom(requests: requests, identifiers: identifiers, tokens: tokens, store: inner)
        return Sample(
            wall: wall, loads: loads, restores: restored, failedRequests: failed + warmFailed + hotFailed,
            floorWall: floorWall, floorLoads: floorLoads, warmNsPerRequest: warm.inNanoseconds / Double(requests),
            hotNsPerCall: hot.inNanoseconds / Double(requests),
            shutdownNsPerSession: shutdown.inNanoseconds / Double(asked), loadsWhileOpen: loadsWhileOpen,
            idiomWall: idiom.wall, idiomLoads: idiom.loads, idiomRestores: idiom.restores,
            idiomFailedRequests: idiom.failed)
    }

    /// A store over `inner` that counts loads, and a configuration whose observer counts restores.
    static func instrumented(_ inner: InMemoryTokenStore) -> (
        CountingTokenStore, RestoreCounter, UserSessionController.Configuration
    ) {
        let restores = RestoreCounter()
        var settings = UserSessionController.Configuration()
        settings.observers = [restores]
        return (CountingTokenStore(inner), restores, settings)
    }

    /// ``measure(requests:_:)`` where request `i` gets user `i % U`'s controller from `session` and its access
    /// token, which must be that user's.
    static func measureSessions(
        requests: Int, identifiers: [String], tokens: [String],
        _ session: @escaping @Sendable (String) async throws -> UserSessionController
    ) async -> (Duration, Int) {
        let users = identifiers.count
        return await measure(requests: requests) { request in
            let user = request % users
            guard let controller = try? await session(identifiers[user]),
                let token = try? await controller.accessToken()
            else { return false }
            return token == tokens[user]
        }
    }

    /// The idiom (``IdiomSessions``), same shape: request `i` gets user `i % U`'s controller and its access token.
    static func measureIdiom(
        requests: Int, identifiers: [String], tokens: [String], store inner: InMemoryTokenStore
    ) async -> (wall: Duration, loads: Int, restores: Int, failed: Int) {
        let (store, restores, settings) = instrumented(inner)
        let sessions = IdiomSessions(store: store, configuration: settings)
        let (wall, failed) = await measureSessions(requests: requests, identifiers: identifiers, tokens: tokens) {
            try await sessions.session(for: $0)
        }
        let counts = (store.loads, restores.count)
        await sessions.shutdown()
        return (wall, counts.0, counts.1, failed)
    }

    /// The floor: request `i` looks its user up in a dictionary behind a `Mutex`; requests `0..<U` first load their
    /// user from the store and insert it. Returns the wall time and the loads the store counted.
    static func measureFloor(
        requests: Int, identifiers: [String], store: CountingTokenStore
    ) async -> (Duration, Int) {
        let users = identifiers.count
        let cache = FloorCache()
        let (wall, _) = await measure(requests: requests) { request in
            let identifier = identifiers[request % users]
            if request < users, let token = try? await store.load(identifier: identifier)?.credentials?.accessToken {
                cache.insert(token, for: identifier)
            }
            // A request that runs before its user's load finds nothing: the floor never waits.
            return cache.lookUp(identifier) != nil || request >= users
        }
        return (wall, store.loads)
    }

    /// Releases `requests` tasks together, each running `request` with its index; returns the wall time from the
    /// release until the last one finished, and how many returned `false`.
    ///
    /// The requests are unstructured tasks, counted out by an ``ArrivalLatch``. In a task group, every child that
    /// finishes is unlinked from the group's list of children by a walk along that list. Children that finish in
    /// the order they were added are found at once; the callers of one get-or-restore flight are resumed in no
    /// particular order, and 10,000 of them then cost the group about half a second on this machine, against a
    /// few milliseconds for the same requests as unstructured tasks.
    static func measure(
        requests: Int, _ request: @escaping @Sendable (Int) async -> Bool
    ) async -> (Duration, Int) {
        let gate = StartGate(expected: requests)
        let finished = ArrivalLatch(expected: requests)
        let failed = FailureTally()
        for index in 0..<requests {
            Task {
                await gate.arriveAndWait()
                if await !request(index) { failed.count.add(1, ordering: .relaxed) }
                finished.arrive()
            }
        }
        await gate.waitForArrivals()
        let clock = ContinuousClock()
        let start = clock.now
        gate.open()
        await finished.wait()
        return (clock.now - start, failed.count.load(ordering: .relaxed))
    }
}

/// A ``TokenStore`` that forwards to another and counts its loads.
final class CountingTokenStore: TokenStore {
    private let inner: any TokenStore
    private let loadCount = Atomic<Int>(0)

    init(_ inner: any TokenStore) {
        self.inner = inner
    }

    /// Loads so far.
    var loads: Int { loadCount.load(ordering: .acquiring) }

    func load(identifier: String) async throws -> StoredSession? {
        loadCount.wrappingAdd(1, ordering: .acquiringAndReleasing)
        return try await inner.load(identifier: identifier)
    }

    func save(_ session: StoredSession, identifier: String) async throws {
        try await inner.save(session, identifier: identifier)
    }

    func remove(identifier: String) async throws { try await inner.remove(identifier: identifier) }
    func loadCurrentIdentifier() async throws -> String? { try await inner.loadCurrentIdentifier() }
    func saveCurrentIdentifier(_ identifier: String?) async throws {
        try await inner.saveCurrentIdentifier(identifier)
    }
    func storedIdentifiers() async throws -> [String] { try await inner.storedIdentifiers() }
}

/// Counts restores: every `.opened` event of the registry's controllers (nothing else opens them in this workload).
final class RestoreCounter: UserSessionObserver {
    private let opened = Atomic<Int>(0)

    var count: Int { opened.load(ordering: .acquiring) }

    func observe(_ event: UserSessionEvent, context: UserSessionEventContext) {
        if case .opened = event.kind { opened.wrappingAdd(1, ordering: .acquiringAndReleasing) }
    }
}

/// The idiom a server author writes instead of ``UserSessionRegistry``: an actor keeping one restore task per
/// identifier, so concurrent first requests for a user share one controller and one restore.
private actor IdiomSessions {
    private let store: any TokenStore
    private let configuration: UserSessionController.Configuration
    private var controllers: [String: Task<UserSessionController, any Error>] = [:]

    init(store: any TokenStore, configuration: UserSessionController.Configuration) {
        self.store = store
        self.configuration = configuration
    }

    func session(for identifier: String) async throws -> UserSessionController {
        if let task = controllers[identifier] { return try await task.value }
        let (store, configuration) = (store, configuration)
        let task = Task {
            let controller = UserSessionController(store: store, configuration: configuration)
            guard try await controller.restore(identifier: identifier) != nil else {
                throw BenchmarkError("the idiom found no stored session for a user")
            }
            return controller
        }
        controllers[identifier] = task
        return try await task.value
    }

    func shutdown() async {
        for task in controllers.values { await (try? task.value)?.shutdown() }
        controllers = [:]
    }
}

/// Requests that failed, counted by the requests themselves.
private final class FailureTally: Sendable {
    let count = Atomic<Int>(0)
}

/// The floor's dictionary: user id to access token, behind a `Mutex`.
private final class FloorCache: Sendable {
    private let tokens = Mutex<[String: String]>([:])

    func insert(_ token: String, for identifier: String) {
        tokens.withLock { $0[identifier] = token }
    }

    func lookUp(_ identifier: String) -> String? {
        tokens.withLock { $0[identifier] }
    }
}
