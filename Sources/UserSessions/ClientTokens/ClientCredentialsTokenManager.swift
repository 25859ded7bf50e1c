import Foundation
import Synchronization

/// The server's own access tokens: the client-credentials grant (RFC 6749 §4.4), one token per ``Key`` (a scope set
/// and a resource set, RFC 8707), and token exchange (RFC 8693) for calls on behalf of a signed-in user.
///
/// Give it the token endpoint and the client's authentication; ask it for a token wherever the server calls another
/// API as itself:
///
/// ```swift
/// let tokens = try ClientCredentialsTokenManager(
///     tokenEndpoint: URL(string: "https://id.example.com/oauth2/token")!,
///     clientAuthentication: .clientSecretBasic(id: "orders-service", secret: secret))
/// let orders = try await tokens.withAccessToken(
///     for: .init(scopes: ["orders.read"]), isAuthenticationFailure: { ($0 as? APIError)?.status == 401 }
/// ) { token in try await api.orders(bearer: token) }
/// ```
///
/// What it guarantees, per key, with the user sessions' refresh rules:
/// - **One token request per expiry**, however many callers and tasks ask at once: the first caller that needs a new
///   token starts the request, the others join it, all get its one answer.
/// - **Proactive refresh**: a token inside its proactive window is still handed out while one request for its
///   successor runs in the background; the windows scale to each token's lifetime
///   (``Configuration/refreshLeadTime``, ``Configuration/proactiveRefreshWindow``).
/// - **Failure classes**: a transient failure (network, timeout, 408, 429, 5xx, unreadable body) and a
///   misconfiguration (`invalid_scope`, `unauthorized_client`, other 4xx) back off, doubling from
///   ``Configuration/initialRetryDelay``: meanwhile callers get the last failure at once and nothing is sent. After a
///   misconfiguration no background request starts until one succeeds. A rejected client (HTTP 401 or
///   `invalid_client`) is ``UserSessionError/Code/clientRejected``, terminal for the key: nothing is sent again until
///   ``reconfigure(_:)``.
/// - **Persistence and fleets**: with a ``Configuration/store`` a restart adopts a stored token that is still fresh
///   instead of asking again; with a ``CoordinatedTokenStore`` (`PostgresTokenStore`, ``FileTokenStore``) each
///   request runs under the store's refresh lease after reading the record, so a fleet sends one request per expiry
///   and the other instances adopt the stored token.
///
/// Client authentication is ``OAuth2TokenRefresher/ClientAuthentication`` (`client_secret_basic`,
/// `client_secret_post`, `private_key_jwt`, or a public client), sent by the same code as the refresher's requests,
/// through the same ``HTTPTransport`` rules (HTTPS or loopback, no redirects, a size limit and a timeout).
///
/// - Important: Tokens and the client secret never appear in errors, events, descriptions or logs. Cancelling a
///   caller stops its wait at once; the request goes on for the others and its token is kept.
public final class ClientCredentialsTokenManager: Sendable {
    /// The token endpoint.
    public let tokenEndpoint: URL
    /// The client's id.
    public let clientID: String
    /// The settings.
    public let configuration: Configuration

    let policy: RefreshStateMachine.Policy
    let clock: SessionClock
    private let requestTimeout: Duration
    private let transport: any HTTPTransport
    private let table: Locked<Table>
    private let waiterIDs = Atomic<UInt64>(0)

    /// The machine of one key, whose waiters are the parked callers.
    typealias Machine = ClientTokenMachine<Parked<String, any Error>>

    /// One key's machine, in a box of its own so that the callers of a key read and change it in place (a
    /// dictionary's value is copied out by a read and moved by a remove and re-insert). Only ever touched under the
    /// table's lock, and never handed out of it.
    final class MachineSlot {
        var machine: Machine

        init(_ machine: Machine) {
            self.machine = machine
        }
    }

    /// Everything the lock protects: every key's machine, and the client's current authentication.
    struct Table {
        var machines: [ClientTokenKey: MachineSlot] = [:]
        var refresher: OAuth2TokenRefresher
        /// Grows with every ``reconfigure(_:)``: a rejection reported by a request sent before is not the new
        /// client's.
        var clientEpoch: UInt64 = 0
    }

    /// What a request that was started needs: the job, and the client as it was when it started.
    private struct Launch {
        let job: Machine.FlightJob
        let refresher: OAuth2TokenRefresher
        let epoch: UInt64
    }

    /// Creates a manager for one client of `tokenEndpoint`.
    ///
    /// - Parameters:
    ///   - tokenEndpoint: The token endpoint; `https`, or `http` on a loopback host.
    ///   - clientAuthentication: How the client authenticates (`client_secret_basic`, `client_secret_post`,
    ///     `private_key_jwt`, or a public client). DPoP is not supported yet.
    ///   - requestTimeout: How long one request may take before it fails as transient. Default 30 s.
    ///   - configuration: The settings; see ``Configuration``.
    ///   - transport: The transport requests go through; `nil` (the default) creates a ``URLSessionHTTPTransport``.
    /// - Throws: ``UserSessionError/Code/insecureEndpoint`` for plain HTTP to a non-loopback host;
    ///   ``UserSessionError/Code/invalidConfiguration`` for a configuration that cannot work.
    public init(
        tokenEndpoint: URL,
        clientAuthentication: OAuth2TokenRefresher.ClientAuthentication,
        requestTimeout: Duration = .seconds(30),
        configuration: Configuration = Configuration(),
        transport: (any HTTPTransport)? = nil
    ) throws {
        try configuration.validate()
        let transport = transport ?? URLSessionHTTPTransport()
        let refresher = try OAuth2TokenRefresher(
            tokenEndpoint: tokenEndpoint, clientAuthentication: clientAuthentication, requestTimeout: requestTimeout,
            clock: configuration.clock, transport: transport)
        self.tokenEndpoint = tokenEndpoint
        self.clientID = clientAuthentication.clientID
        self.configuration = configuration
        self.requestTimeout = requestTimeout
        self.transport = transport
        policy = configuration.policy
        clock = configuration.clock
        table = Locked(Table(refresher: refresher))
    }

    // MARK: - Tokens

    /// A valid access token for `key`, requesting one first when there is none or it is about to expire.
    ///
    /// A fresh token is returned without suspending. N callers that find the token expiring together cause one
    /// request and all get its token.
    ///
    /// - Throws: ``UserSessionError`` with code ``UserSessionError/Code/invalidTokenRequest`` (the key cannot be
    ///   sent), ``UserSessionError/Code/tokenRequestFailed`` or ``UserSessionError/Code/transportFailure`` (with a
    ///   ``UserSessionError/failureClass``; also thrown at once while the key backs off),
    ///   ``UserSessionError/Code/malformedTokenResponse``, ``UserSessionError/Code/clientRejected`` (until
    ///   ``reconfigure(_:)``); `CancellationError` when the calling task is cancelled while it waits.
    nonisolated(nonsending) public func accessToken(for key: Key = Key()) async throws -> String {
        let tokenKey = key.tokenKey
        let now = clock.nowSeconds()
        switch hotRead(tokenKey, now: now) {
        case .token(let token): return token
        case .known: break
        case .unknown: try tokenKey.validate()
        }
        return try await token(for: tokenKey, rejected: nil, grant: .clientCredentials, validated: true, now: now)
    }

    /// Runs `operation` with an access token for `key`; when it fails authentication, runs it once more with another
    /// token.
    ///
    /// If `isAuthenticationFailure` says the error is an authentication failure (such as an HTTP 401 from the
    /// resource server) and the token used is still the current one, one new token is requested (joining a request
    /// already in flight) and the operation replayed once with it; if the token had been replaced meanwhile, the
    /// replay uses the replacement without a request. Other errors pass through untouched. A refused token is never
    /// adopted from the store again. More forced requests than ``Configuration/refreshLoopPolicy`` allows fail with
    /// ``UserSessionError/Code/refreshLoop``.
    ///
    /// - Throws: What ``accessToken(for:)`` throws, and what `operation` throws.
    nonisolated(nonsending) public func withAccessToken<R>(
        for key: Key = Key(),
        isAuthenticationFailure: (any Error) -> Bool,
        _ operation: (String) async throws -> R
    ) async throws -> R {
        let tokenKey = key.tokenKey
        let used = try await accessToken(for: key)
        do {
            return try await operation(used)
        } catch {
            guard isAuthenticationFailure(error) else { throw error }
            let replacement = try await token(for: tokenKey, rejected: used, grant: .clientCredentials)
            notify(.replayed, key: tokenKey)
            return try await operation(replacement)
        }
    }

    /// Forgets the token of `key`: the next call requests a new one. A request in flight still answers the callers
    /// waiting for it, but its token is not kept. The stored record, if any, is removed.
    ///
    /// - Throws: The store's error when removing the record fails (the token is forgotten in memory anyway).
    public func forget(_ key: Key) async throws {
        let tokenKey = key.tokenKey
        let now = clock.nowSeconds()
        table.withLock { table in
            guard let slot = table.machines[tokenKey] else { return }
            slot.machine.forgotten(now: now)
            if slot.machine.isIdle { table.machines[tokenKey] = nil }
        }
        notify(.forgotten, key: tokenKey)
        if let store = configuration.store {
            try await store.remove(identifier: record(for: tokenKey).identifier)
        }
    }

    /// Replaces the client's authentication (a rotated secret, say) and lets every key ask again: a rejection
    /// (``UserSessionError/Code/clientRejected``) and the backoff of failed requests are forgotten. Tokens held stay
    /// valid.
    ///
    /// - Throws: ``UserSessionError/Code/invalidConfiguration`` when `clientAuthentication` names another client id
    ///   (make another manager for another client).
    public func reconfigure(_ clientAuthentication: OAuth2TokenRefresher.ClientAuthentication) throws {
        guard ExactIdentifier.areEqual(clientAuthentication.clientID, clientID) else {
            throw UserSessionError(
                .invalidConfiguration, "reconfigure(_:) keeps the client id; make another manager for another client")
        }
        let refresher = try OAuth2TokenRefresher(
            tokenEndpoint: tokenEndpoint, clientAuthentication: clientAuthentication, requestTimeout: requestTimeout,
            clock: clock, transport: transport)
        table.withLock { table in
            table.refresher = refresher
            table.clientEpoch += 1
            for slot in table.machines.values { slot.machine.reconfigured() }
        }
    }

    // MARK: - The single flight

    /// What the hot path found for a key.
    enum HotRead {
        /// Its token, fresh.
        case token(String)
        /// A machine and no fresh token: the key was checked when its machine was made.
        case known
        /// No machine: the key must be checked before it is used.
        case unknown
    }

    /// The token of `key` when it is fresh at `now`: one lookup in one short critical section, nothing else.
    func hotRead(_ key: ClientTokenKey, now: Double) -> HotRead {
        table.withLock { table in
            guard let slot = table.machines[key] else { return .unknown }
            return slot.machine.freshToken(now: now).map { .token($0) } ?? .known
        }
    }

    /// Everything but the fresh path: serve, wait for the request in flight, start one, or fail. `validated` says
    /// the key was checked already (a key is checked before its machine is made, and checking is a pure function of
    /// the key); `now` is the time the caller read, if it read one.
    nonisolated(nonsending) func token(
        for key: ClientTokenKey, rejected: String?, grant: ClientTokenGrant, validated: Bool = false,
        now: Double? = nil
    ) async throws -> String {
        if !validated { try key.validate() }
        let waiterID = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            // The caller is answered right here (served, failed), or kept in exactly one waiter slot, which every
            // path that resumes it empties under the lock first.
            try await Parked.wait { (caller: Parked<String, any Error>) in
                enqueue(key, rejected: rejected, grant: grant, waiterID: waiterID, now: now, caller: caller)
            }
        } onCancel: {
            cancelWaiter(id: waiterID, key: key)
        }
    }

    /// Decides the caller's request under the lock, then answers it (the outcome returned) or starts the request it
    /// waits for (`nil`: it waits).
    ///
    /// Synchronous and never inlined: inlined into the async closure that calls it, its locals would enlarge that
    /// closure's async frame, which lives on the waiting task's allocator for as long as the caller waits.
    @inline(never)
    private func enqueue(
        _ key: ClientTokenKey, rejected: String?, grant: ClientTokenGrant, waiterID: UInt64, now: Double?,
        caller: Parked<String, any Error>
    ) -> Result<String, any Error>? {
        let now = now ?? clock.nowSeconds()
        let policy = policy
        let (asked, launch) = table.withLock { table -> (Machine.Asked, Launch?) in
            let slot: MachineSlot
            if let existing = table.machines[key] {
                slot = existing
            } else {
                slot = MachineSlot(Machine(policy: policy))
                table.machines[key] = slot
            }
            let asked = slot.machine.tokenAsked(
                now: now, rejected: rejected, waiter: .init(id: waiterID, continuation: caller))
            switch asked {
            case .started(let job), .servedRefreshing(_, let job):
                return (asked, Launch(job: job, refresher: table.refresher, epoch: table.clientEpoch))
            case .served, .failed, .joined:
                return (asked, nil)
            }
        }
        if let launch {
            Task { await self.fly(launch, key: key, grant: grant) }
        }
        switch asked {
        case .served(let token), .servedRefreshing(let token, _):
            return .success(token)
        case .failed(let error):
            return .failure(error)
        case .joined, .started:
            // The cancellation handler may have run before the waiter was registered and found nothing.
            if Task.isCancelled { cancelWaiter(id: waiterID, key: key) }
            return nil
        }
    }

    private func cancelWaiter(id: UInt64, key: ClientTokenKey) {
        let caller = table.withLock { $0.machines[key]?.machine.waiterCancelled(id: id) }
        caller?.resume(throwing: CancellationError())
    }

    /// One request: obtain a token, land it in the key's machine, tell the observers, resume the waiters.
    private func fly(_ launch: Launch, key: ClientTokenKey, grant: ClientTokenGrant) async {
        let started = ContinuousClock.now
        var outcome: Result<ObtainedToken, UserSessionError>
        do {
            outcome = .success(try await obtain(launch, key: key, grant: grant))
        } catch {
            outcome = .failure(Self.classified(error))
        }
        if case .failure(var error) = outcome, error.code == .clientRejected {
            // Rejected credentials that were replaced while this request ran say nothing about the new ones.
            let epoch = table.withLock { $0.clientEpoch }
            if epoch != launch.epoch {
                error.code = .tokenRequestFailed
                error.failureClass = .misconfiguration
                outcome = .failure(error)
            }
        }
        let now = clock.nowSeconds()
        let jitter = Double.random(in: 0...1)
        let landing = table.withLock { table -> Machine.Landing in
            guard let slot = table.machines[key] else { return .init() }
            let landing: Machine.Landing
            switch outcome {
            case .success(let obtained):
                landing = slot.machine.flightSucceeded(
                    id: launch.job.id, credentials: obtained.credentials, requested: obtained.requested, now: now)
            case .failure(let error):
                landing = slot.machine.flightFailed(id: launch.job.id, error: error, now: now, jitter: jitter)
            }
            if slot.machine.isIdle { table.machines[key] = nil }
            return landing
        }
        let duration = ContinuousClock.now - started
        switch outcome {
        case .success(let obtained):
            notify(
                obtained.requested ? .tokenIssued : .tokenAdopted, key: key, expiresAt: obtained.credentials.expiresAt,
                waiters: landing.waiters.count, duration: duration)
        case .failure(let error):
            let kind: ClientTokenEvent.Kind =
                error.code == .clientRejected ? .clientRejected : .requestFailed(error.failureClass ?? .transient)
            notify(kind, key: key, waiters: landing.waiters.count, duration: duration, detail: error.message)
        }
        let result = landing.result.mapError { $0 as any Error }
        for waiter in landing.waiters {
            waiter.resume(with: result)
        }
    }

    /// A token and where it came from.
    struct ObtainedToken: Sendable {
        let credentials: Credentials
        /// `true` when the token endpoint issued it, `false` when it was adopted from the store.
        let requested: Bool
    }

    /// The token for `launch`: adopted from the store when a fresh one is there, else requested (and stored). With a
    /// coordinated store, under its refresh lease; when the store fails, requested without it.
    private func obtain(_ launch: Launch, key: ClientTokenKey, grant: ClientTokenGrant) async throws -> ObtainedToken {
        let request: @Sendable () async throws -> Credentials = { [clock] in
            try await grant.request(
                scopes: key.scopes, resources: key.resources, through: launch.refresher, clock: clock)
        }
        guard case .clientCredentials = grant, let store = configuration.store else {
            return ObtainedToken(credentials: try await request(), requested: true)
        }
        let record = record(for: key)
        let job = launch.job
        if let coordinated = store as? any CoordinatedTokenStore {
            let result: Result<ObtainedToken, UserSessionError>
            do {
                result = try await coordinated.withRefreshLease(identifier: record.identifier) {
                    await self.obtainCoordinated(record, in: coordinated, job: job, key: key, request: request)
                }
            } catch {
                notify(.persistenceFailed, key: key, detail: "the store's refresh lease failed: \(Self.summary(error))")
                return ObtainedToken(credentials: try await request(), requested: true)
            }
            return try result.get()
        }
        var stored: StoredSession?
        do {
            stored = try await store.load(identifier: record.identifier)
        } catch {
            notify(.persistenceFailed, key: key, detail: "reading the stored token failed: \(Self.summary(error))")
        }
        if let credentials = record.credentials(in: stored), adoptable(credentials, for: job) {
            return ObtainedToken(credentials: credentials, requested: false)
        }
        let credentials = try await request()
        do {
            try await store.save(record.stored(credentials), identifier: record.identifier)
        } catch {
            notify(.persistenceFailed, key: key, detail: "storing the token failed: \(Self.summary(error))")
        }
        return ObtainedToken(credentials: credentials, requested: true)
    }

    /// The part of a request that runs under a coordinated store's lease: read, adopt or request, write on the
    /// revision read. Never throws, so that an error of the request is not taken for one of the lease.
    private func obtainCoordinated(
        _ record: ClientTokenRecord, in store: any CoordinatedTokenStore, job: Machine.FlightJob,
        key: ClientTokenKey, request: @Sendable () async throws -> Credentials
    ) async -> Result<ObtainedToken, UserSessionError> {
        var loaded: RevisedSession?
        var readable = true
        do {
            loaded = try await store.loadRevised(identifier: record.identifier)
        } catch {
            readable = false
            notify(.persistenceFailed, key: key, detail: "reading the stored token failed: \(Self.summary(error))")
        }
        if let credentials = record.credentials(in: loaded?.session), adoptable(credentials, for: job) {
            return .success(ObtainedToken(credentials: credentials, requested: false))
        }
        let credentials: Credentials
        do {
            credentials = try await request()
        } catch {
            return .failure(Self.classified(error))
        }
        do {
            if readable {
                _ = try await store.save(
                    record.stored(credentials), identifier: record.identifier, expectedRevision: loaded?.revision)
            } else {
                try await store.save(record.stored(credentials), identifier: record.identifier)
            }
        } catch {
            notify(.persistenceFailed, key: key, detail: "storing the token failed: \(Self.summary(error))")
        }
        return .success(ObtainedToken(credentials: credentials, requested: true))
    }

    /// Whether a stored token may be adopted by `job`: not the token an operation was refused with, outside its lead
    /// time, and living longer than the token held.
    private func adoptable(_ credentials: Credentials, for job: Machine.FlightJob) -> Bool {
        guard credentials.accessToken != job.rejectedToken else { return false }
        let held = RefreshStateMachine.Held(credentials, policy: policy)
        return clock.nowSeconds() < held.expiresAt - held.leadTime(policy) && held.expiresAt > job.heldExpiresAt
    }

    func record(for key: ClientTokenKey) -> ClientTokenRecord {
        ClientTokenRecord(canonicalKey: key.canonical(clientID: clientID, tokenEndpoint: tokenEndpoint))
    }

    /// Every failure as a ``UserSessionError`` with a class.
    static func classified(_ error: any Error) -> UserSessionError {
        if var error = error as? UserSessionError {
            if error.failureClass == nil { error.failureClass = .transient }
            return error
        }
        if error is CancellationError {
            return UserSessionError(.tokenRequestFailed, "the request was cancelled", failureClass: .cancelled)
        }
        return UserSessionError(
            .tokenRequestFailed, "the request failed (\(type(of: error)))", failureClass: .transient,
            underlying: error)
    }

    /// A description of a store's error for an event: its own description when it is ours (never a secret), else its
    /// type.
    static func summary(_ error: any Error) -> String {
        (error as? UserSessionError)?.description ?? String(describing: type(of: error))
    }

    // MARK: - Observers

    func notify(
        _ kind: ClientTokenEvent.Kind, key: ClientTokenKey, expiresAt: Date? = nil, waiters: Int = 0,
        duration: Duration? = nil, detail: String? = nil
    ) {
        let observers = configuration.observers
        guard !observers.isEmpty else { return }
        let event = ClientTokenEvent(
            kind: kind, clientID: clientID, scopes: key.scopes.sorted(), resources: key.resources.sorted(),
            subject: key.subject?.value, audience: key.audience?.value, expiresAt: expiresAt, waiters: waiters,
            duration: duration, detail: detail)
        for observer in observers { observer.observeClientToken(event) }
    }

    // MARK: - Dropping keys

    /// Forgets every key of the user `subject`, failing the callers of their requests in flight with `error`;
    /// returns them, for the events.
    func drop(subject: ExactIdentifier, failingWith error: UserSessionError) -> [ClientTokenKey] {
        let now = clock.nowSeconds()
        return table.withLock { table in
            let keys = table.machines.keys.filter { $0.subject == subject }
            for key in keys {
                guard let slot = table.machines[key] else { continue }
                slot.machine.forgotten(now: now, failingWith: error)
                if slot.machine.isIdle { table.machines[key] = nil }
            }
            return keys
        }
    }

    /// How many callers wait for `key`'s request in flight (for tests).
    func waiterCount(_ key: Key) -> Int {
        table.withLock { $0.machines[key.tokenKey]?.machine.waiterCount ?? 0 }
    }
}

extension ClientCredentialsTokenManager: CustomStringConvertible {
    /// The endpoint and the client id; never the secret.
    public var description: String {
        "ClientCredentialsTokenManager(\(tokenEndpoint.absoluteString), client: \(clientID))"
    }
}
