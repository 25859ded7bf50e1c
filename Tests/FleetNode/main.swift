// FleetNode: one process of a fleet that shares a user through a token store.
//
// Restores one user from the store, then runs TASKS tasks that ask the controller for an access token in a loop,
// until a task gets a token that lives longer than SECONDS (the test's token endpoint issues one after the last
// expiry it plays), or until the time limit. Prints one JSON line with what it saw; tokens are never printed, only
// a short hash of the last one.
//
// Usage: FleetNode --store file:DIR|postgres:URL#NAMESPACE --identifier ID --token-endpoint URL [--client-id ID] [--client-secret S]
//                  [--tasks 100] [--until-lifetime-over 600] [--time-limit 120] [--name NODE]
//                  [--hold-lease | --sign-out-mode | --client-credentials] [--report-refresh] [--stop-on-error]
//                  [--sealing-key ID:BASE64] [--dpop]
// With --client-credentials the node asks a ClientCredentialsTokenManager on the store for the scope "fleet" instead
// of restoring a user (--identifier is ignored), until it holds a token that lives longer than SECONDS.
// (`postgres:` only in a build with the PostgreSQL trait; `--sealing-key`, which wraps the store in a
// SealedTokenStore of namespace "fleet" with that one key, only with the Sealing trait; `--dpop`, whose refresher signs a
// DPoP proof with the key stored beside the credentials, only with the OpenIDConnect trait.)
import Foundation
import UserSessions

#if OpenIDConnect
import UserSessionsOpenIDConnect
#endif

struct Options {
    var store = ""
    var identifier = ""
    var tokenEndpoint = ""
    var clientID = "client"
    var clientSecret = "client-secret"
    var tasks = 100
    var untilLifetimeOver = 600.0
    var timeLimit = 120.0
    var name = "node"
    /// `ID:BASE64`: seal the store's records with this key (the Sealing trait).
    var sealingKey: String?
    /// Refresh with DPoP proofs (the OpenIDConnect trait's signer), signed with the stored credentials' key.
    var dpop = false
    /// Only take the refresh lease of `identifier`, say "holding" on standard output, and wait to be killed.
    var holdLease = false
    /// Restore the user, say "open" on standard output, then either clear it everywhere when standard input says
    /// "clear" (printing "cleared UNIXTIME"), or print "closed-elsewhere UNIXTIME" when another node cleared it.
    var signOutMode = false
    /// Print "refreshing UNIXTIME" each time this node sends a refresh request.
    var reportRefresh = false
    /// Stop every task at the first error (a fleet whose refresh token was refused), instead of at the time limit.
    var stopOnError = false
    /// Ask a ClientCredentialsTokenManager for the server's own token instead of restoring a user.
    var clientCredentials = false

    init(_ arguments: [String]) throws {
        var iterator = arguments.makeIterator()
        while let flag = iterator.next() {
            if flag == "--hold-lease" {
                holdLease = true
                continue
            }
            if flag == "--dpop" {
                dpop = true
                continue
            }
            if flag == "--sign-out-mode" || flag == "--report-refresh" || flag == "--stop-on-error"
                || flag == "--client-credentials"
            {
                if flag == "--sign-out-mode" { signOutMode = true }
                if flag == "--client-credentials" { clientCredentials = true }
                if flag == "--report-refresh" { reportRefresh = true }
                if flag == "--stop-on-error" { stopOnError = true }
                continue
            }
            guard let value = iterator.next() else {
                throw StoreSelection.Unknown(description: "\(flag) wants a value")
            }
            switch flag {
            case "--store": store = value
            case "--identifier": identifier = value
            case "--token-endpoint": tokenEndpoint = value
            case "--client-id": clientID = value
            case "--client-secret": clientSecret = value
            case "--tasks": tasks = Int(value) ?? tasks
            case "--until-lifetime-over": untilLifetimeOver = Double(value) ?? untilLifetimeOver
            case "--time-limit": timeLimit = Double(value) ?? timeLimit
            case "--name": name = value
            case "--sealing-key": sealingKey = value
            default: throw StoreSelection.Unknown(description: "unknown option \(flag)")
            }
        }
    }
}

/// A short, stable hash of a token for output (FNV-1a, 64 bits, first 12 hex digits): equal tokens give equal
/// hashes, and the token cannot be read back from it.
func shortHash(_ token: String) -> String {
    String(StableHash64(token).hexDigits.suffix(12))
}

/// What the tasks saw, shared between them (an actor, so ThreadSanitizer sees its synchronization).
actor Tallies {
    var tally = Tally()

    var done: Bool { tally.done || tally.stopped }

    func saw(_ token: String, lifetime: Double, threshold: Double) {
        tally.tokens.insert(token)
        if lifetime > threshold { tally.done = true }
    }

    func failed(_ error: any Error, stop: Bool) {
        tally.errors += 1
        tally.lastError = "\(error)"
        if stop { tally.stopped = true }
    }
}

struct Tally {
    var tokens: Set<String> = []
    var errors = 0
    var lastError = ""
    var done = false
    var stopped = false
}

/// Holds the lease until the process is killed (for the test that SIGKILLs a lease holder).
func holdLease(_ options: Options, store: any TokenStore) async throws -> Int32 {
    guard let store = store as? any CoordinatedTokenStore else {
        throw StoreSelection.Unknown(description: "the store does not coordinate")
    }
    try await store.withRefreshLease(identifier: options.identifier) {
        FileHandle.standardOutput.write(Data("holding\n".utf8))
        while true { try await Task.sleep(for: .seconds(3600)) }
    }
    return 0
}

/// The wall-clock time, for lines other processes compare (all nodes run on one machine).
func unixTime() -> String { String(format: "%.6f", Date().timeIntervalSince1970) }

func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

/// Holds the user open until it is cleared, here (told by standard input) or by another node.
func signOut(_ options: Options, store: any TokenStore) async throws -> Int32 {
    var configuration = UserSessionController.Configuration()
    configuration.persistsCurrentIdentifier = false
    let controller = UserSessionController(store: store, refresher: NoRefresher(), configuration: configuration)
    let events = controller.events(bufferSize: 1_000)
    guard try await controller.restore(identifier: options.identifier) != nil else {
        throw StoreSelection.Unknown(description: "nothing to restore")
    }
    try await StoreSelection.waitUntilListening(store)
    let closedElsewhere = Task { () -> String? in
        for await event in events {
            if case .closed(.clearedElsewhere) = event.kind { return unixTime() }
        }
        return nil
    }
    // The node's own time limit, so that a node that is never told anything does not outlive its test.
    let limit = options.timeLimit
    Task.detached {
        try await Task.sleep(for: .seconds(limit))
        say("timed-out")
        exit(3)
    }
    let told = Task.detached { readLine(strippingNewline: true) }
    say("open")
    if await told.value == "clear" {
        try await controller.closeAndClear()
        say("cleared \(unixTime())")
        closedElsewhere.cancel()
    } else if let time = await closedElsewhere.value {
        say("closed-elsewhere \(time)")
    }
    await controller.shutdown()
    return 0
}

/// Says "refreshing UNIXTIME" before each refresh request when `reports` (the test that kills a node mid-refresh
/// learns from it whom to kill, and when).
struct ReportingRefresher: TokenRefresher {
    let base: OAuth2TokenRefresher
    let reports: Bool

    func refresh(_ credentials: Credentials) async throws -> Credentials {
        if reports { say("refreshing \(unixTime())") }
        return try await base.refresh(credentials)
    }
}

/// The refresher of a node that never refreshes (the sign-out mode).
struct NoRefresher: TokenRefresher {
    func refresh(_ credentials: Credentials) async throws -> Credentials {
        throw UserSessionError(.refreshFailed, "this node does not refresh")
    }
}

/// Runs TASKS tasks that each call `call` in a loop (2 ms apart), tallying the tokens and lifetimes it returns, until
/// one is longer than SECONDS, until the time limit, or (with --stop-on-error) until the first error.
func callInLoop(
    _ options: Options, tallies: Tallies,
    _ call: @escaping @Sendable () async throws -> (token: String, lifetime: Double)
) async {
    let deadline = ContinuousClock.now + .seconds(options.timeLimit)
    let threshold = options.untilLifetimeOver
    let stopOnError = options.stopOnError
    await withTaskGroup(of: Void.self) { group in
        for _ in 0..<options.tasks {
            group.addTask {
                while ContinuousClock.now < deadline, await !tallies.done {
                    do {
                        let (token, lifetime) = try await call()
                        await tallies.saw(token, lifetime: lifetime, threshold: threshold)
                    } catch {
                        await tallies.failed(error, stop: stopOnError)
                    }
                    try? await Task.sleep(for: .milliseconds(2))
                }
            }
        }
    }
}

/// The DPoP proofs of `--dpop`, or `nil`.
func dpopProofs(_ options: Options) throws -> DPoPProofs? {
    guard options.dpop else { return nil }
    #if OpenIDConnect
    return DPoPProofs(signer: DPoPSigner())
    #else
    throw StoreSelection.Unknown(description: "--dpop needs a build with the OpenIDConnect trait")
    #endif
}

func run(_ options: Options) async throws -> Int32 {
    try await StoreSelection.withStore(for: options.store) { store in
        try await run(options, store: StoreSelection.sealing(store, key: options.sealingKey))
    }
}

func run(_ options: Options, store: any TokenStore) async throws -> Int32 {
    if options.holdLease { return try await holdLease(options, store: store) }
    if options.signOutMode { return try await signOut(options, store: store) }
    guard let endpoint = URL(string: options.tokenEndpoint) else {
        throw StoreSelection.Unknown(description: "bad --token-endpoint")
    }
    if options.clientCredentials { return try await clientCredentials(options, store: store, endpoint: endpoint) }
    let oauth = try OAuth2TokenRefresher(
        tokenEndpoint: endpoint,
        clientAuthentication: .clientSecretBasic(id: options.clientID, secret: options.clientSecret),
        requestTimeout: .seconds(10), dpop: try dpopProofs(options))
    let refresher = ReportingRefresher(base: oauth, reports: options.reportRefresh)
    var configuration = UserSessionController.Configuration()
    configuration.persistsCurrentIdentifier = false
    let controller = UserSessionController(store: store, refresher: refresher, configuration: configuration)
    let events = controller.events(bufferSize: 100_000)
    let counting = Task {
        var refreshed = 0
        var adopted = 0
        var closed: [String] = []
        for await event in events {
            switch event.kind {
            case .credentialsRefreshed: refreshed += 1
            case .credentialsUpdated(let change) where change.adoptedFromStore: adopted += 1
            case .closed(let reason): closed.append("\(reason)")
            default: break
            }
        }
        return (refreshed, adopted, closed)
    }
    let tallies = Tallies()
    // A restore that refreshes can be refused (the test that kills a lease holder): that ends the node's work.
    do {
        guard try await controller.restore(identifier: options.identifier) != nil else {
            throw StoreSelection.Unknown(description: "nothing to restore")
        }
    } catch let error as UserSessionError {
        await tallies.failed(error, stop: true)
    }
    await callInLoop(options, tallies: tallies) {
        let token = try await controller.accessToken()
        return (token, controller.credentials?.expiresAt?.timeIntervalSinceNow ?? 0)
    }
    let finalToken = controller.credentials?.accessToken ?? ""
    await controller.close()
    await controller.shutdown()
    let (refreshed, adopted, closed) = await counting.value
    let result = await tallies.tally
    let summary: [String: Any] = [
        "node": options.name,
        "tokens_seen": result.tokens.count,
        "refreshes": refreshed,
        "adopted": adopted,
        "errors": result.errors,
        "last_error": result.lastError,
        "settled": result.done,
        "stopped": result.stopped,
        "closed": closed,
        "final_token_hash": shortHash(finalToken),
    ]
    let data = try JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys])
    print(String(decoding: data, as: UTF8.self))
    return result.done && result.errors == 0 ? 0 : 1
}

/// Counts the tokens a ClientCredentialsTokenManager obtained and adopted (its observer).
final class ClientTokenCounter: UserSessionObserver {
    // `Locked`, not `Mutex`: FleetNode runs under ThreadSanitizer too, which cannot see `Mutex` on Linux.
    private let counts = Locked((issued: 0, adopted: 0, failed: 0, expiresAt: Date.distantPast))

    func observe(_ event: UserSessionEvent, context: UserSessionEventContext) {}

    func observeClientToken(_ event: ClientTokenEvent) {
        counts.withLock { counts in
            switch event.kind {
            case .tokenIssued:
                counts.issued += 1
                counts.expiresAt = max(counts.expiresAt, event.expiresAt ?? .distantPast)
            case .tokenAdopted:
                counts.adopted += 1
                counts.expiresAt = max(counts.expiresAt, event.expiresAt ?? .distantPast)
            case .requestFailed, .clientRejected: counts.failed += 1
            default: break
            }
        }
    }

    var issued: Int { counts.withLock { $0.issued } }
    var adopted: Int { counts.withLock { $0.adopted } }
    /// The expiry of the longest-lived token obtained so far.
    var expiresAt: Date { counts.withLock { $0.expiresAt } }
}

/// The client-credentials mode: TASKS tasks ask one manager on the shared store for the scope "fleet".
func clientCredentials(_ options: Options, store: any TokenStore, endpoint: URL) async throws -> Int32 {
    let counter = ClientTokenCounter()
    let tokens = try ClientCredentialsTokenManager(
        tokenEndpoint: endpoint,
        clientAuthentication: .clientSecretBasic(id: options.clientID, secret: options.clientSecret),
        requestTimeout: .seconds(10), configuration: .init(store: store, observers: [counter]))
    let key = ClientCredentialsTokenManager.Key(scopes: ["fleet"])
    let tallies = Tallies()
    await callInLoop(options, tallies: tallies) {
        // The lifetime of the newest token the manager obtained (it hands out no other).
        (try await tokens.accessToken(for: key), counter.expiresAt.timeIntervalSinceNow)
    }
    // The token the node settled on, asked once all tasks stopped: the last token a task happened to report can be
    // an older one its call returned before the manager adopted the final grant (seen under ThreadSanitizer).
    let finalToken = (try? await tokens.accessToken(for: key)) ?? ""
    let result = await tallies.tally
    let summary: [String: Any] = [
        "node": options.name,
        "tokens_seen": result.tokens.count,
        "issued": counter.issued,
        "adopted": counter.adopted,
        "errors": result.errors,
        "last_error": result.lastError,
        "settled": result.done,
        "final_token_hash": shortHash(finalToken),
    ]
    let data = try JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys])
    print(String(decoding: data, as: UTF8.self))
    return result.done && result.errors == 0 ? 0 : 1
}

do {
    exit(try await run(Options(Array(CommandLine.arguments.dropFirst()))))
} catch {
    FileHandle.standardError.write(Data("FleetNode: \(error)\n".utf8))
    exit(2)
}
