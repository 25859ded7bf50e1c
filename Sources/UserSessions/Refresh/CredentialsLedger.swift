import Foundation
import Synchronization

/// The owner of each identifier's credentials in this process, shared by every controller that uses the same store
/// instance (the registry's controllers and standalone ones alike).
///
/// Credentials belong to the user, not to the controller that happened to hold them. For each identifier the
/// ledger keeps what must outlive a controller:
/// - the **refresh in flight** (single-flight per identifier and refresh token: a second controller presenting the
///   same refresh token joins it instead of sending the token again);
/// - the **newest rotation** and the refresh tokens it spent, so a restore that read a spent token from the store
///   adopts the rotation instead of presenting the spent token (``readThrough(_:identifier:)``);
/// - whether that rotation is **unwritten**, with its own retry schedule: the ledger keeps writing it until the
///   store takes it or the user signs out, whether or not a controller still holds the identifier;
/// - the **revision** last seen in a coordinated store, so a late write is conditional on it;
/// - the **sign-out fence**: ``signedOut(identifier:)`` fences exactly one identifier, wherever it comes from;
/// - a **refused** refresh token (`invalid_grant`): later refreshes and restores of it fail at once with
///   ``UserSessionError/Code/refreshTokenRefused``, without contacting the server, until the user signs in again.
///
/// An entry lives only while a controller holds it, a refresh is in flight, a write is in progress or pending, or a
/// refusal has not reached the store: a server with 100,000 users who came and went keeps no entry for them.
///
/// Effects (store calls, resuming waiters) run after the lock is released.
final class CredentialsLedger: Sendable {
    let store: any TokenStore
    let coordinatedStore: (any CoordinatedTokenStore)?
    private let entries = Locked<[ExactIdentifier: Entry]>([:])

    init(store: any TokenStore) {
        self.store = store
        self.coordinatedStore = store as? any CoordinatedTokenStore
    }

    // MARK: - One ledger per store instance

    private struct WeakLedger: Sendable {
        weak var ledger: CredentialsLedger?
    }

    private static let directory = Locked<[ObjectIdentifier: WeakLedger]>([:])
    private static let fences = Atomic<UInt64>(0)

    /// The ledger of `store`: one per store instance (a class), shared by every controller given that instance. A
    /// store that is a value type has no instance to key on and gets a ledger of its own per caller; the controllers
    /// of one registry share the registry's ledger whatever the store is.
    static func shared(for store: any TokenStore) -> CredentialsLedger {
        guard type(of: store) is AnyObject.Type else { return CredentialsLedger(store: store) }
        let key = ObjectIdentifier(store as AnyObject)
        return directory.withLock { directory in
            if let ledger = directory[key]?.ledger { return ledger }
            directory = directory.filter { $0.value.ledger != nil }
            let ledger = CredentialsLedger(store: store)
            directory[key] = WeakLedger(ledger: ledger)
            return ledger
        }
    }

    /// A fence value never used before in this process: an entry that is dropped and made again never matches a
    /// fence taken from its predecessor.
    private static func nextFence() -> UInt64 {
        fences.wrappingAdd(1, ordering: .relaxed).newValue
    }

    // MARK: - State

    /// What the ledger holds for one identifier.
    ///
    /// An identifier that is only held (an idle open session, the common case on a server) costs three words in the
    /// dictionary: its fence, its holder count and no ``Detail``. The rest is made at the first refresh, write or
    /// sign-out and lives in a ``Detail`` until the entry is dropped.
    struct Entry {
        /// Changes at every sign-out: a write taken under an older fence must not land. Mirrored in the detail's
        /// ``FenceCell``, which a reserved write reads without the lock.
        var fence: UInt64 {
            didSet { detail?.fenceCell.fence.store(fence, ordering: .releasing) }
        }
        /// Controllers (and restores in progress) holding the identifier.
        var holders = 0
        /// Everything beyond the fence and the holders, made when first needed.
        private var detail: Detail?

        init(fence: UInt64) { self.fence = fence }

        /// The detail, made now if there is none (mutating: only in the ledger's critical sections).
        private mutating func made() -> Detail {
            if let detail { return detail }
            let made = Detail(fence: fence)
            detail = made
            return made
        }

        /// The refreshes in flight, one per refresh token presented (a sign-in brings a token of its own).
        var flights: SingleFlight<String, Joiner> {
            get { detail?.flights ?? SingleFlight() }
            _modify { yield &made().flights }
        }
        /// The newest credentials a refresh produced (kept while the entry lives).
        var current: StoredSession? {
            get { detail?.current }
            set { made().current = newValue }
        }
        /// Whether ``current`` is not known to be in the store.
        var unwritten: Bool {
            get { detail?.unwritten ?? false }
            set { made().unwritten = newValue }
        }
        /// Refresh tokens the server has rotated, each with what its rotation returned (newest last, bounded).
        var rotations: [(spent: String, result: Credentials)] { detail?.rotations ?? [] }
        /// A refresh token the server refused for good.
        var refused: String? {
            get { detail?.refused }
            set { made().refused = newValue }
        }
        /// Writes in progress (of any controller or the ledger).
        var writes: Int {
            get { detail?.writes ?? 0 }
            set { made().writes = newValue }
        }
        /// The ledger's own write loop runs.
        var retrying: Bool {
            get { detail?.retrying ?? false }
            set { made().retrying = newValue }
        }
        /// The schedule the write loop follows, from the last controller that held the identifier.
        var schedule: Schedule? {
            get { detail?.schedule }
            set { made().schedule = newValue }
        }
        /// The revision last seen in a coordinated store.
        var revision: UInt64? {
            get { detail?.revision }
            set { made().revision = newValue }
        }
        /// Whether the last fence came from a sign-out (not a sign-in): only then is a late write removed again.
        var signedOut: Bool {
            get { detail?.signedOut ?? false }
            set { made().signedOut = newValue }
        }

        var isIdle: Bool { holders == 0 && (detail?.isIdle ?? true) }

        /// The cell that mirrors ``fence`` outside the lock (the detail is made now if there is none).
        mutating func madeFenceCell() -> FenceCell { made().fenceCell }

        mutating func spend(_ token: String, for result: Credentials) {
            if isSpent(token) { return }
            let detail = made()
            detail.rotations.append((token, result))
            if detail.rotations.count > 16 { detail.rotations.removeFirst() }
        }

        func isSpent(_ token: String) -> Bool { detail?.rotations.contains { $0.spent == token } ?? false }

        /// The newest credentials reached from the spent `token` by the rotations known here (fenced or not: a
        /// spent token must never be presented again, whoever holds it), or `nil` if `token` is not spent.
        func latestRotation(of token: String) -> Credentials? {
            guard let rotations = detail?.rotations, !rotations.isEmpty else { return nil }
            var result: Credentials?
            var next = token
            for _ in 0...rotations.count {
                guard let rotation = rotations.first(where: { $0.spent == next }) else { break }
                result = rotation.result
                guard let following = rotation.result.refreshToken, following != next else { break }
                next = following
            }
            return result
        }
    }

    /// The part of an ``Entry`` beyond its fence and holders. A class, so that an entry stays small in the
    /// dictionary; it is read and changed only inside the ledger's critical sections, like the entry that holds it.
    final class Detail {
        /// The entry's fence, readable outside the lock by the holder of a ``WritePermit``.
        let fenceCell: FenceCell
        var flights = SingleFlight<String, Joiner>()
        var current: StoredSession?
        var unwritten = false
        var rotations: [(spent: String, result: Credentials)] = []
        var refused: String?
        var writes = 0
        var retrying = false
        var schedule: Schedule?
        var revision: UInt64?
        var signedOut = false

        init(fence: UInt64) { fenceCell = FenceCell(fence: fence) }

        var isIdle: Bool { flights.isEmpty && !unwritten && writes == 0 && !retrying }
    }

    /// An entry's fence as an atomic, so that a ``WritePermit`` can be checked right before its write without
    /// taking the ledger's lock. Written only inside the ledger's critical sections, with the entry's fence.
    final class FenceCell: Sendable {
        let fence: Atomic<UInt64>

        init(fence: UInt64) { self.fence = Atomic(fence) }
    }

    /// The write of a rotation, reserved for the refresh that produced it in the same critical section that
    /// recorded the rotation: so a refresh commit takes two of the ledger's critical sections, one when the
    /// refresher returns and one when the write finishes (``writeFinished(_:fence:wrote:revision:schedule:)``).
    ///
    /// Its holder must spend it exactly once: by writing with it (``begins(_:)``, then `writeFinished`) or by
    /// giving it up (``forfeit(_:)``). Until then the entry counts the write as in progress and is not dropped.
    struct WritePermit: Sendable {
        let identifier: String
        /// The fence the rotation was recorded under.
        let fence: UInt64
        fileprivate let cell: FenceCell
    }

    /// A caller that joined the refresh in flight for the token it presents.
    typealias Joiner = UnsafeContinuation<Result<Credentials, UserSessionError>, Never>

    /// The refresh a caller leads, as its leader keeps it: the entry's ``SingleFlight`` (keyed by the refresh token
    /// presented) keeps only who joined.
    struct Flight {
        /// The refresh token it presented.
        let sent: String
        /// The entry's fence when it started: a sign-out since makes its result unwritable.
        let fence: UInt64
    }

    /// When the ledger retries an unwritten rotation.
    struct Schedule: Sendable {
        var clock: SessionClock
        var policy: RefreshStateMachine.Policy
    }

    private func modify<Value>(_ key: ExactIdentifier, _ body: (inout Entry) -> Value) -> Value {
        entries.withLock { entries in
            var entry = entries[key] ?? Entry(fence: Self.nextFence())
            let value = body(&entry)
            entries[key] = entry.isIdle ? nil : entry
            return value
        }
    }

    /// How many identifiers the ledger holds an entry for (a probe for tests and the benchmark).
    var entryCount: Int { entries.withLock { $0.count } }

    /// How many callers wait for `identifier`'s refresh in flight besides the one running it (a probe).
    func joinedWaiters(_ identifier: String) -> Int {
        entries.withLock { entries in
            entries[ExactIdentifier(identifier)]?.flights.waiterCount ?? 0
        }
    }

    // MARK: - Holding

    /// A controller (or a restore in progress) holds `identifier`; returns the fence its writes are taken under.
    @discardableResult
    func hold(_ identifier: String) -> UInt64 {
        modify(ExactIdentifier(identifier)) { entry in
            entry.holders += 1
            return entry.fence
        }
    }

    /// The holder of `identifier` let it go; a rotation it could not write stays and is written on `schedule`.
    func release(_ identifier: String, schedule: Schedule? = nil) {
        let start = modify(ExactIdentifier(identifier)) { entry -> Bool in
            entry.holders = max(0, entry.holders - 1)
            if let schedule, entry.unwritten { entry.schedule = schedule }
            return startLoopIfNeeded(&entry)
        }
        if start { startWriteLoop(identifier) }
    }

    /// Whether `identifier` has a refresh in flight or an unwritten rotation: such a session is never evicted.
    func hasPendingWork(_ identifier: String) -> Bool {
        entries.withLock { entries in
            guard let entry = entries[ExactIdentifier(identifier)] else { return false }
            return !entry.flights.isEmpty || entry.unwritten || entry.writes > 0
        }
    }

    /// The fence of `identifier` now (a new entry if none exists: its fence matches nothing older).
    func fence(_ identifier: String) -> UInt64 {
        entries.withLock { entries in entries[ExactIdentifier(identifier)]?.fence } ?? 0
    }

    // MARK: - Reading through

    /// What a restore of `identifier` must use instead of `stored`: the unwritten rotation when the store still
    /// holds a refresh token it spent.
    ///
    /// - Throws: ``UserSessionError/Code/refreshTokenRefused`` when the stored refresh token was refused for good
    ///   (recorded here or in the store).
    func readThrough(_ stored: StoredSession, identifier: String) throws -> (session: StoredSession, adopted: Bool) {
        let answer = entries.withLock { entries -> StoredSession? in
            guard let entry = entries[ExactIdentifier(identifier)] else { return nil }
            guard let token = stored.credentials?.refreshToken else { return nil }
            if entry.refused == token { return stored.markedRefused() }
            if let rotated = entry.latestRotation(of: token) {
                return StoredSession(userInfo: stored.userInfo, credentials: rotated)
            }
            return nil
        }
        let result = answer ?? stored
        if result.refreshTokenRefused { throw Self.refusedError }
        return (result, answer != nil)
    }

    static let refusedError = UserSessionError(
        .refreshTokenRefused,
        "the authorization server refused the stored refresh token; the user must sign in again",
        failureClass: .terminal)

    // MARK: - Refreshing

    /// Refreshes `credentials` of `identifier` once per refresh token in the whole process: a caller presenting
    /// the token of the refresh in flight joins it; one presenting a token already rotated gets the rotation; one
    /// presenting a refused token fails at once. Only the caller that starts the flight runs `call`.
    ///
    /// `fence` is the fence of the session asking: a session of a user who signed out since (from elsewhere) may
    /// still refresh what it serves, but its result is neither recorded here nor written.
    ///
    /// The caller that ran `call` gets a ``WritePermit`` with a rotation the ledger recorded: the write of that
    /// rotation is reserved for it.
    func refresh(
        identifier: String, userInfo: UserInfo, credentials: Credentials, fence: UInt64,
        call: () async -> Result<Credentials, UserSessionError>
    ) async -> (result: Result<Credentials, UserSessionError>, permit: WritePermit?) {
        guard let sent = credentials.refreshToken else { return (await call(), nil) }
        let key = ExactIdentifier(identifier)
        enum Step {
            case answered(Result<Credentials, UserSessionError>)
            case join
            case run(Flight)
        }
        let step = modify(key) { entry -> Step in
            if entry.refused == sent { return .answered(.failure(Self.refusedError)) }
            if let rotated = entry.latestRotation(of: sent) { return .answered(.success(rotated)) }
            guard entry.flights.lead(sent) else { return .join }
            return .run(Flight(sent: sent, fence: fence))
        }
        switch step {
        case .answered(let result):
            return (result, nil)
        case .join:
            let result = await withVisibleUnsafeContinuation { continuation in
                let joined = modify(key) { entry -> Bool in
                    entry.flights.join(sent, id: Self.nextFence(), continuation)
                }
                // The flight ended between the two critical sections: ask again.
                if !joined {
                    Task {
                        let outcome = await self.refreshAgain(identifier, userInfo, credentials)
                        continuation.resumeVisibly(returning: outcome)
                    }
                }
            }
            return (result, nil)
        case .run(let flight):
            let result = await call()
            let (waiters, recordRefusal, reserved) = modify(key) { entry in
                flightReturned(&entry, flight: flight, userInfo: userInfo, result: result)
            }
            for waiter in waiters { waiter.resumeVisibly(returning: result) }
            if recordRefusal { await recordRefusalInStore(identifier: identifier, refused: sent) }
            let permit = reserved.map { WritePermit(identifier: identifier, fence: flight.fence, cell: $0) }
            return (result, permit)
        }
    }

    private func refreshAgain(_ identifier: String, _ userInfo: UserInfo, _ credentials: Credentials) async
        -> Result<Credentials, UserSessionError>
    {
        let key = ExactIdentifier(identifier)
        let answer = modify(key) { entry -> Result<Credentials, UserSessionError>? in
            guard let sent = credentials.refreshToken else { return nil }
            if entry.refused == sent { return .failure(Self.refusedError) }
            if let rotated = entry.latestRotation(of: sent) { return .success(rotated) }
            return nil
        }
        return answer
            ?? .failure(
                UserSessionError(
                    .refreshFailed, "the shared refresh ended without a result", failureClass: .transient))
    }

    /// The refresh `flight` returned `result`: records the rotation (unless the identifier signed out since) and
    /// reserves its write for the flight's leader, or records the refusal. Returns the joined waiters, whether the
    /// refusal must be recorded in the store, and the fence cell of a reserved write.
    private func flightReturned(
        _ entry: inout Entry, flight: Flight, userInfo: UserInfo, result: Result<Credentials, UserSessionError>
    ) -> ([Joiner], Bool, FenceCell?) {
        let waiters = entry.flights.land(flight.sent)
        let fenced = entry.fence != flight.fence
        switch result {
        case .success(let credentials):
            if credentials.refreshToken != flight.sent { entry.spend(flight.sent, for: credentials) }
            guard !fenced else { return (waiters, false, nil) }
            entry.current = StoredSession(userInfo: userInfo, credentials: credentials)
            entry.unwritten = true
            entry.refused = nil
            entry.writes += 1
            return (waiters, false, entry.madeFenceCell())
        case .failure(let error):
            guard error.failureClass == .terminal, error.code != .refreshTokenRefused, !fenced else {
                return (waiters, false, nil)
            }
            entry.refused = flight.sent
            entry.writes += 1
            return (waiters, true, nil)
        }
    }

    /// Records in the store that `refused` was refused, if the stored record still holds it: restores of every
    /// instance then fail at once instead of presenting it again.
    private func recordRefusalInStore(identifier: String, refused: String) async {
        defer {
            modify(ExactIdentifier(identifier)) { entry in entry.writes -= 1 }
        }
        do {
            if let coordinatedStore {
                guard let revised = try await coordinatedStore.loadRevised(identifier: identifier),
                    revised.session.credentials?.refreshToken == refused, !revised.session.refreshTokenRefused
                else { return }
                _ = try await coordinatedStore.save(
                    revised.session.markedRefused(), identifier: identifier, expectedRevision: revised.revision)
            } else {
                guard let stored = try await store.load(identifier: identifier),
                    stored.credentials?.refreshToken == refused, !stored.refreshTokenRefused
                else { return }
                try await store.save(stored.markedRefused(), identifier: identifier)
            }
        } catch {
            // The ledger still remembers the refusal for this process; another instance learns it at its own
            // first refusal.
        }
    }

    // MARK: - Writes

    /// A write of `identifier`'s credentials taken under `fence` is about to start: `false` when the identifier
    /// signed out since (the write must not happen).
    func writeBegins(_ identifier: String, fence: UInt64) -> Bool {
        modify(ExactIdentifier(identifier)) { entry -> Bool in
            guard entry.fence == fence else { return false }
            entry.writes += 1
            return true
        }
    }

    /// Whether the write `permit` reserved may start now: `true` unless the identifier signed out since the
    /// rotation was recorded. Reads the fence without the lock; a permit that may not start is given up here.
    func begins(_ permit: WritePermit) -> Bool {
        guard permit.cell.fence.load(ordering: .acquiring) == permit.fence else {
            forfeit(permit)
            return false
        }
        return true
    }

    /// Gives up the write `permit` reserved (its holder will not write with it).
    func forfeit(_ permit: WritePermit) {
        writeFinished(permit.identifier, fence: permit.fence, wrote: nil)
    }

    /// What a write that landed must do next.
    enum Landing: Equatable {
        case done
        /// The identifier signed out while the write was in progress and nothing newer exists: remove it again.
        case removeAgain
    }

    /// A write that ``writeBegins(_:fence:)`` allowed finished; `credentials` is what it wrote (when it did).
    @discardableResult
    func writeFinished(
        _ identifier: String, fence: UInt64, wrote credentials: Credentials?, revision: UInt64? = nil,
        schedule: Schedule? = nil
    ) -> Landing {
        let (landing, start) = modify(ExactIdentifier(identifier)) { entry -> (Landing, Bool) in
            entry.writes = max(0, entry.writes - 1)
            if let revision { entry.revision = revision }
            guard entry.fence == fence else {
                // Landed after a sign-out: undone. After a sign-in it is left to the new session, whose writes
                // follow.
                return (entry.signedOut && credentials != nil ? .removeAgain : .done, false)
            }
            if let credentials { landed(&entry, credentials) }
            if let schedule, entry.unwritten, entry.schedule == nil { entry.schedule = schedule }
            return (.done, startLoopIfNeeded(&entry))
        }
        if start { startWriteLoop(identifier) }
        return landing
    }

    /// `credentials` are in the store now.
    private func landed(_ entry: inout Entry, _ credentials: Credentials) {
        guard let current = entry.current?.credentials else { return }
        if current.accessToken == credentials.accessToken && current.refreshToken == credentials.refreshToken {
            entry.unwritten = false
        } else if let token = credentials.refreshToken, entry.isSpent(token) {
            // An older version landed after the newest: the newest must be written again.
            entry.unwritten = true
        } else {
            // Credentials from elsewhere (an update, a sign-in, another instance) replaced the rotation in the
            // store; the rotation still answers a controller presenting a token it spent.
            entry.unwritten = false
        }
    }

    /// The user signed in again: a refusal is forgotten, a pending rotation is no longer written (it would overwrite
    /// the sign-in), and the results of refreshes in flight from before are fenced. Refreshes in flight and what the
    /// ledger knows about spent tokens stay: a controller still holding the old credentials joins their refresh or
    /// gets their rotation instead of presenting a token twice.
    @discardableResult
    func signedIn(_ identifier: String) -> UInt64 {
        modify(ExactIdentifier(identifier)) { entry in
            entry.fence = Self.nextFence()
            entry.signedOut = false
            entry.refused = nil
            entry.unwritten = false
            return entry.fence
        }
    }

    /// `identifier` signed out (from a controller, the registry or another instance): every write taken before
    /// this point is fenced, a pending rotation is dropped, and the refresh in flight writes nothing.
    func signedOut(identifier: String) {
        modify(ExactIdentifier(identifier)) { entry in
            entry.fence = Self.nextFence()
            entry.signedOut = true
            entry.unwritten = false
            entry.refused = nil
            entry.revision = nil
        }
    }

    /// A rotation nobody is going to write (its flight went stale): the ledger writes it on its schedule.
    func ensureWritten(_ identifier: String, schedule: Schedule) {
        let start = modify(ExactIdentifier(identifier)) { entry -> Bool in
            if entry.schedule == nil { entry.schedule = schedule }
            return startLoopIfNeeded(&entry)
        }
        if start { startWriteLoop(identifier) }
    }

    // MARK: - The write loop

    private func startLoopIfNeeded(_ entry: inout Entry) -> Bool {
        // While a controller holds the identifier, its gate retries its own failed writes.
        guard entry.unwritten, entry.holders == 0, !entry.retrying, entry.schedule != nil else { return false }
        entry.retrying = true
        return true
    }

    /// Writes `identifier`'s unwritten rotation until the store takes it or the identifier signs out, on the
    /// schedule of the controllers' failed-write retries (initial delay, doubling, with jitter).
    private func startWriteLoop(_ identifier: String) {
        Task { await self.writeLoop(identifier) }
    }

    private func writeLoop(_ identifier: String) async {
        let key = ExactIdentifier(identifier)
        var attempt = 1
        while true {
            let schedule = entries.withLock { $0[key]?.schedule }
            guard let schedule else {
                modify(key) { $0.retrying = false }
                return
            }
            let delay = schedule.policy.backoff(attempt: attempt, jitter: Double.random(in: 0...1))
            try? await schedule.clock.sleep(until: schedule.clock.nowSeconds() + delay)
            let job = modify(key) { entry -> (StoredSession, UInt64, [String])? in
                guard entry.unwritten, entry.holders == 0, let current = entry.current else {
                    // Written, signed out, or held again (the holder's gate writes; its release restarts this).
                    entry.retrying = false
                    return nil
                }
                entry.writes += 1
                return (current, entry.fence, entry.rotations.map(\.spent))
            }
            guard let (session, fence, spent) = job else { return }
            var wrote = false
            var newRevision: UInt64?
            do {
                if let coordinatedStore {
                    // Conditional on the record this rotation replaces: one removed or rotated elsewhere stands.
                    let record = try await coordinatedStore.loadRevised(identifier: identifier)
                    guard let record, let token = record.session.credentials?.refreshToken, spent.contains(token)
                    else { throw UserSessionError(.revisionConflict, "the record changed elsewhere") }
                    newRevision = try await coordinatedStore.save(
                        session, identifier: identifier, expectedRevision: record.revision)
                } else {
                    try await store.save(session, identifier: identifier)
                }
                wrote = true
            } catch let error as UserSessionError where error.code == .revisionConflict {
                // Another instance wrote a newer record (or removed it): that one stands.
                modify(key) { entry in
                    entry.writes -= 1
                    entry.unwritten = false
                    entry.retrying = false
                }
                return
            } catch {
                wrote = false
            }
            let landing = modify(key) { entry -> Landing in
                entry.writes -= 1
                if let newRevision { entry.revision = newRevision }
                guard entry.fence == fence else {
                    entry.retrying = false
                    return wrote && entry.signedOut ? .removeAgain : .done
                }
                if wrote, let credentials = session.credentials { landed(&entry, credentials) }
                if !entry.unwritten { entry.retrying = false }
                return .done
            }
            if landing == .removeAgain { try? await store.remove(identifier: identifier) }
            let done = entries.withLock { entries in !(entries[key]?.retrying ?? false) }
            if done { return }
            attempt += 1
        }
    }
}

extension StoredSession {
    /// The same record, marked as holding a refresh token the server refused.
    func markedRefused() -> StoredSession {
        var copy = self
        copy.refreshTokenRefused = true
        return copy
    }
}
