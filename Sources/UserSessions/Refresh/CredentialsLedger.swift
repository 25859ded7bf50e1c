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
/// - the **write turn**: every write of the identifier's record made in this process (a rotation, a retry, a
///   refusal, a sign-in, a sign-out, a reseal) runs in it, one at a time in arrival order, and a write taken under
///   a fence passes it only while the fence holds (``enterWriteTurn(_:fence:reserved:)``);
/// - the **fence**: a sign-out (``signOut(_:remove:)``) and a sign-in (``signIn(_:write:)``) change it in the write
///   turn, right after their own store call succeeded, so no write taken before them lands after them, and a
///   sign-out the store refused changes nothing;
/// - the **views** holding it (each controller holding it): a refresh that advances the newest credentials is told to
///   the others, which take it while they have no flight of their own, so an idle controller never presents a
///   refresh token another one spent, however long ago (``CredentialsLedgerView``);
/// - a **refused** refresh token (`invalid_grant`): later refreshes and restores of it fail at once with
///   ``UserSessionError/Code/refreshTokenRefused``, without contacting the server, until the user signs in again.
///
/// An entry lives only while a controller holds it, a refresh is in flight, a write is in progress or pending, or a
/// refusal has not reached the store: a server with 100,000 users who came and went keeps no entry for them.
///
/// Effects (store calls, resuming waiters, telling views) run after the lock is released.
final class CredentialsLedger: Sendable {
    let store: any TokenStore
    let coordinatedStore: (any CoordinatedTokenStore)?
    private let entries = Locked<[ExactIdentifier: Entry]>([:])
    /// The callers waiting for an identifier to have nothing in flight and nothing owed to the store
    /// (``settled(_:within:clock:)``: a process shutting down), kept beside the entries rather than in them: the wait
    /// is rare, and an entry stays small. Taken only inside the lock of `entries` (the one nesting of the ledger's
    /// locks), so a caller parks and is resumed in step with the entry it waits for. `settleWaiting` counts them, so
    /// that a critical section looks for them only while one waits.
    private let settleWaiters = Locked<[ExactIdentifier: [Parked<Void, Never>]]>([:])
    private let settleWaiting = Atomic<Int>(0)
    #if DEBUG
    /// Critical sections taken through `modify` (a probe for tests: how many sections an operation takes).
    let sectionsTaken = Atomic<Int>(0)
    #endif

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
    /// An identifier that is only held (an idle open session, the common case on a server) costs four words in the
    /// dictionary: its fence, its holder count, its first view (a weak reference to a controller, which its gate
    /// references weakly already, so it costs the controller no side table of its own) and no ``Detail``. The rest
    /// is made at the first refresh, write or sign-out and lives in a ``Detail`` until the entry is dropped, or until
    /// the one holder that signed in settles in with nothing else to remember (``Entry/settleSignIn(fence:holding:)``):
    /// an idle session that signed in alone then costs what a restored one costs.
    struct Entry {
        /// Changes at every sign-out and sign-in: a write taken under an older fence must not land.
        var fence: UInt64
        /// Controllers (and restores in progress) holding the identifier.
        var holders = 0
        /// The first view of the holders that have one (a controller), weakly: an identifier held by one controller,
        /// the common case, keeps one word for it. Told when another holder's refresh or update advances the newest.
        private weak var firstView: AnyObject?
        /// Everything beyond the fence and the holders, made when first needed.
        private var detail: Detail?

        init(fence: UInt64) { self.fence = fence }

        /// The detail, made now if there is none (mutating: only in the ledger's critical sections).
        private mutating func made() -> Detail {
            if let detail { return detail }
            let made = Detail()
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
        /// The refreshes the server answered, each with what it returned (newest last, bounded).
        var rotations: [Rotation] { detail?.rotations ?? [] }
        /// A refresh token the server refused for good.
        var refused: String? {
            get { detail?.refused }
            set { made().refused = newValue }
        }
        /// The backoff every holder of the newest credentials keeps after their refresh failed for a while.
        var backoff: SharedBackoff? {
            get { detail?.backoff }
            set {
                guard newValue != nil || detail?.backoff != nil else { return }
                made().backoff = newValue
            }
        }
        /// The backoff of a failed refresh that sent `sent`, if one is kept.
        func backoff(sending sent: String?) -> FlightMachine.Backoff? {
            guard let backoff, let sent, backoff.sent == sent else { return nil }
            return backoff.backoff
        }
        /// Writes the ledger owes that have not asked for the write turn yet (each keeps the entry): a record to
        /// remove again, the repair of a write that landed late while another held the turn.
        var reservedWrites: Int {
            get { Int(detail?.reservedWrites ?? 0) }
            set { made().reservedWrites = Int32(clamping: newValue) }
        }
        /// The ledger's own write loop runs.
        var retrying: Bool {
            get { detail?.retrying ?? false }
            set { made().retrying = newValue }
        }
        /// The schedule the write loop follows, from the last controller that held the identifier.
        var schedule: Schedule? {
            get { detail?.kept?.schedule }
            set { made().kept = newValue.map(KeptSchedule.init) }
        }
        /// Keeps `schedule` for the write loop unless the entry has one already (the first writer's stays; the
        /// writer whose write failed last replaces it by assigning ``schedule`` itself). `schedule` is made only
        /// when it is kept.
        mutating func keepSchedule(_ schedule: @autoclosure () -> Schedule?) {
            guard self.schedule == nil, let schedule = schedule() else { return }
            self.schedule = schedule
        }
        /// Whether the last fence came from a sign-out (not a sign-in): only then is a late write removed again.
        var signedOut: Bool { detail?.signedOutUnder == fence }
        /// Whether the user signed out after `fence` was the entry's: the last sign-out made a newer fence (fences only
        /// grow). A sign-in since does not hide it, unlike ``signedOut``.
        func signedOut(after fence: UInt64) -> Bool { (detail?.signedOutUnder ?? 0) > fence }
        /// A sign-in or a sign-out holds the write turn: the record may change on either side of its fence.
        var fencingWrite: Bool {
            get { detail?.fencingWrite ?? false }
            set { made().fencingWrite = newValue }
        }
        /// The fence this entry was made with. Fences only grow, so a session's fence older than this one was taken
        /// from an entry dropped since: that session let the identifier go (nobody held it in between), and a
        /// refresh it still runs has outlived it and may no longer present a token
        /// (``CredentialsLedger/refresh(identifier:userInfo:credentials:fence:heldFence:call:)``).
        var bornFence: UInt64 { detail?.bornFence ?? fence }

        /// The fence changes (a sign-in or a sign-out): the first change keeps the fence the entry was made with.
        mutating func renewFence() {
            let detail = made()
            if detail.bornFence == nil { detail.bornFence = fence }
            fence = CredentialsLedger.nextFence()
        }
        /// The token of the write holding the write turn, if one does.
        var turn: UInt64? {
            get { detail?.turn }
            set { made().turn = newValue }
        }
        /// Writes waiting for the turn, in arrival order.
        var turnQueue: [TurnWaiter] {
            get { detail?.turnQueue ?? [] }
            _modify { yield &made().turnQueue }
        }
        /// Writes that lost the turn to a close's deadline and have not landed: the entry (and what it knows of a
        /// sign-out since) stays until they land, so their landing is judged against the right fence.
        var lateWrites: Int {
            get { Int(detail?.lateWrites ?? 0) }
            set { made().lateWrites = Int32(clamping: newValue) }
        }

        var isIdle: Bool { holders == 0 && (detail?.isIdle ?? true) }

        /// The one holder settled in after its sign-in landed: it holds `fence` (the one the sign-in made) and
        /// `credentials`. When the detail keeps nothing beyond that sign-in, it goes: the entry is then what a session
        /// restored from the record holds (born under the holder's fence, the store holding the newest), so an idle
        /// signed-in session costs the ledger no more than a restored one.
        ///
        /// Only with a single holder: another may hold an older fence, which the sign-in's ``bornFence`` still lets
        /// lead. That holder is the one settling in, which has no refresh in flight under an older fence
        /// (``CredentialsLedger/signInSettled(_:fence:holding:)``), so every refresh it starts leads under `fence`,
        /// and one that presents `credentials` presents the newest, as ``current`` said.
        mutating func settleSignIn(fence: UInt64, holding credentials: Credentials?) {
            guard holders == 1, self.fence == fence, !signedOut, let detail,
                detail.keepsOnlyALandedSignIn(of: credentials)
            else { return }
            self.detail = nil
        }

        /// Whether it keeps a ``Detail`` (a probe).
        var keepsDetail: Bool { detail != nil }

        /// Whether a refresh is in flight or a write is owed (``Detail/hasPendingWork``).
        var hasPendingWork: Bool { detail?.hasPendingWork ?? false }

        /// A holder's view holds the identifier (once per hold: a view that holds twice appears twice).
        mutating func addView(_ view: any CredentialsLedgerView) {
            if firstView == nil { firstView = view } else { made().otherViews.append(WeakView(view: view)) }
        }

        /// Forgets one hold of `view` (and any view that is gone).
        mutating func removeView(_ view: any CredentialsLedgerView) {
            if firstView === view {
                firstView = detail?.otherViews.isEmpty == false ? made().otherViews.removeFirst().view : nil
            } else if let index = detail?.otherViews.firstIndex(where: { $0.view === view }) {
                made().otherViews.remove(at: index)
            }
            if detail?.otherViews.contains(where: { $0.view == nil }) == true {
                made().otherViews.removeAll { $0.view == nil }
            }
        }

        /// Every view still there, each once, when there are two or more: a refresh's result is news only to a view
        /// other than the one whose flight led it, so an identifier held by one view has nobody to tell.
        var viewsToTell: [any CredentialsLedgerView] {
            guard detail?.otherViews.isEmpty == false else { return [] }
            let views = self.views
            return views.count > 1 ? views : []
        }

        /// Every view still there, each once.
        var views: [any CredentialsLedgerView] {
            var views: [any CredentialsLedgerView] = []
            for object in [firstView] + (detail?.otherViews ?? []).map(\.view) {
                guard let view = object as? any CredentialsLedgerView, !views.contains(where: { $0 === view }) else {
                    continue
                }
                views.append(view)
            }
            return views
        }

        /// The write turn goes to a new holder (the turn is free, or handed on to it).
        mutating func grantTurn() -> TurnGrant {
            let token = CredentialsLedger.nextFence()
            turn = token
            return TurnGrant(token: token, fence: fence)
        }

        /// The user signed in with `session` (now in the store); returns the new fence. See
        /// ``CredentialsLedger/signedIn(_:session:)``.
        mutating func signIn(_ session: StoredSession?) -> UInt64 {
            renewFence()
            refused = nil
            backoff = nil
            unwritten = false
            current = session
            // A refresh of the signed-in credentials already returned (the session refreshed while its sign-in was
            // being written): the store holds the refresh token it spent. Its rotation is the newest, and unwritten:
            // the session's commit writes it, or the ledger when that session ended meanwhile (`ensureWritten`).
            if let session, let credentials = session.credentials, let rotated = latestRotation(of: credentials) {
                current = StoredSession(userInfo: session.userInfo, credentials: rotated)
                unwritten = true
            }
            return fence
        }

        /// The user signed out; returns the views to tell (every one: each of its sessions closes). See
        /// ``CredentialsLedger/signedOut(identifier:)``.
        @discardableResult
        mutating func signOut() -> [any CredentialsLedgerView] {
            renewFence()
            made().signedOutUnder = fence
            unwritten = false
            current = nil
            refused = nil
            backoff = nil
            return views
        }

        /// How many refreshes an entry remembers once the store holds its newest credentials.
        static let rotationWindow = 16

        /// Records that the server answered a refresh of `presented` (which sent `sent`) with `result`.
        ///
        /// The rotations are a bounded window only while nothing is unwritten. While something is, the store may
        /// hold any refresh token spent since its last landing, and each of them must still lead to the newest: a
        /// restore that reads the record is handed the newest (``CredentialsLedger/readThrough(_:identifier:fence:)``),
        /// and the write loop's conditional write over a coordinated store recognizes the record it replaces
        /// (`writeUnwritten`). A store down for longer than the window's refreshes otherwise kept a spent token that
        /// every restore presented again. The window closes again at the first refresh after the store took the
        /// newest (each refresh is one expiry, and the loop breaker bounds them).
        mutating func recordRefresh(of presented: Credentials, sent: String, result: Credentials) {
            record(Rotation(sentAccessToken: presented.accessToken, sent: sent, result: result))
        }

        /// Records that `newer` replaced `previous` as the identifier's newest without a refresh (credentials handed
        /// over, a record another instance stored, or what replaced a refresh's result while it ran): whoever still
        /// holds `previous` is handed `newer` like the result of a refresh of them, rotated or not, and never
        /// presents them again.
        mutating func recordReplacement(of previous: Credentials, by newer: Credentials) {
            guard let sent = previous.refreshToken, !previous.isSameVersion(as: newer) else { return }
            record(Rotation(sentAccessToken: previous.accessToken, sent: sent, result: newer, refreshed: false))
        }

        private mutating func record(_ rotation: Rotation) {
            // A server that answers with the very credentials it was sent taught nothing newer.
            guard rotation.rotated || rotation.result.accessToken != rotation.sentAccessToken else { return }
            // Each refresh and each replacement once. A refresh of credentials a replacement already answers is still
            // recorded (it was replaced while it ran, and spent them); the replacement, recorded first, still answers.
            let known = rotations.contains {
                $0.sent == rotation.sent && $0.sentAccessToken == rotation.sentAccessToken
                    && $0.refreshed == rotation.refreshed
            }
            if known { return }
            let detail = made()
            detail.rotations.append(rotation)
            let excess = detail.rotations.count - Self.rotationWindow
            if excess > 0, !detail.unwritten { detail.rotations.removeFirst(excess) }
        }

        /// Whether the store holds exactly `session`: the newest credentials known here, landed by a write, and nothing
        /// unwritten since.
        func hasLanded(_ session: StoredSession) -> Bool {
            !unwritten && current == session
        }

        /// Whether the entry knows credentials newer than those of `session` (reached from them by a refresh or a
        /// replacement), or their refusal: written, they would put an older version, or a refused one, over what
        /// the identifier has now. A refresh whose credentials an update replaced while it ran is one (the
        /// replacement answers its result); a refresh another controller refreshed again before this one's commit
        /// got the turn is another.
        func isSuperseded(_ session: StoredSession) -> Bool {
            guard let credentials = session.credentials else { return false }
            return known(credentials) != nil
        }

        /// Whether the server rotated `token` away (it must never be presented again).
        func isSpent(_ token: String) -> Bool {
            detail?.rotations.contains { $0.sent == token && $0.rotated } ?? false
        }

        /// What presenting `credentials` gets without asking the server: `.refused` when its refresh token, or the
        /// newest one the refreshes known here reached from it, was refused for good; `.rotated` with the newest
        /// credentials reached from it (and whether refreshes alone led there); `nil` when it is the newest known
        /// and not refused. One walk along the rotations.
        ///
        /// The newest is checked too: a caller holding credentials older than a refused refresh (a store that
        /// lags behind a write it failed, read back as a "replacement") must not be handed that refresh's result as
        /// if it were fresh.
        func known(_ credentials: Credentials) -> Known? {
            guard let token = credentials.refreshToken else { return nil }
            if refused == token { return .refused }
            guard let reached = newestReached(from: credentials) else { return nil }
            if let newest = reached.credentials.refreshToken, refused == newest { return .refused }
            return .rotated(reached.credentials, refreshedOnly: reached.refreshedOnly)
        }

        /// The newest credentials the refreshes known here reached from `credentials`, or `nil` when `credentials`
        /// are the newest known. Fenced or not: a spent refresh token must never be presented again, whoever holds
        /// it, and credentials a server refreshed without rotating are refreshed once, whoever holds them.
        func latestRotation(of credentials: Credentials) -> Credentials? {
            newestReached(from: credentials)?.credentials
        }

        /// ``latestRotation(of:)``, and whether every step to it was a refresh (not a replacement: credentials handed
        /// over or adopted, ``recordReplacement(of:by:)``).
        func newestReached(from credentials: Credentials) -> (credentials: Credentials, refreshedOnly: Bool)? {
            guard let rotations = detail?.rotations, !rotations.isEmpty, var token = credentials.refreshToken else {
                return nil
            }
            var accessToken = credentials.accessToken
            var result: (credentials: Credentials, refreshedOnly: Bool)?
            for _ in 0...rotations.count {
                guard let rotation = rotations.first(where: { $0.answers(token, accessToken) }) else { break }
                result = (rotation.result, (result?.refreshedOnly ?? true) && rotation.refreshed)
                guard let following = rotation.result.refreshToken else { break }
                (token, accessToken) = (following, rotation.result.accessToken)
            }
            return result
        }
    }

    /// What the ledger already knows of presented credentials (``Entry/known(_:)``).
    enum Known {
        case refused
        /// The newest credentials reached, and whether every step to them was a refresh (no replacement).
        case rotated(Credentials, refreshedOnly: Bool)
    }

    /// A refresh the server answered (what it was sent and what it returned), or a replacement of the newest
    /// credentials without a refresh (``Entry/recordReplacement(of:by:)``), which answers their holders the same way.
    struct Rotation {
        /// The access token of the credentials presented (told apart when the server does not rotate).
        let sentAccessToken: String
        /// The refresh token presented.
        let sent: String
        let result: Credentials
        /// A refresh the server answered; `false` for a replacement.
        var refreshed = true

        /// Whether the server rotated the refresh token (so `sent` is spent).
        var rotated: Bool { result.refreshToken != sent }

        /// Whether this refresh replaced credentials presenting `token` with `accessToken`: every holder of a
        /// rotated refresh token, or the holder of the very credentials a server refreshed without rotating.
        func answers(_ token: String, _ accessToken: String) -> Bool {
            sent == token && (rotated || sentAccessToken == accessToken)
        }
    }

    /// A write waiting for an identifier's write turn.
    struct TurnWaiter {
        /// The fence it was taken under (`nil`: unconditional, a sign-in, a sign-out or a reseal).
        let fence: UInt64?
        /// Resumed with its turn, or `nil` when the fence changed before its turn came.
        let caller: Parked<TurnGrant?, Never>
    }

    /// A write turn as it was granted: the token its holder passes back when it leaves, and the identifier's fence
    /// at that moment. Only a sign-in or a sign-out changes the fence in the turn, so a holder that is neither writes
    /// under this fence until it leaves (a sign-out seen in the store may still change it, and the landing of the
    /// write is judged against the fence then:
    /// ``writeFinished(_:fence:wrote:replacing:failed:schedule:turn:leavesTurn:)``).
    struct TurnGrant: Equatable {
        let token: UInt64
        let fence: UInt64
    }

    /// The part of an ``Entry`` beyond its fence and holders. A class, so that an entry stays small in the
    /// dictionary; it is read and changed only inside the ledger's critical sections, like the entry that holds it.
    ///
    /// A session that refreshed, or signed in beside another holder, keeps one while it is open, so its fields are
    /// laid out by size, words first and flags last, leaving no padding between them; the write loop's schedule,
    /// kept only while a write is owed, is referenced rather than held (see ``KeptSchedule``).
    final class Detail {
        var flights = SingleFlight<String, Joiner>()
        var rotations: [Rotation] = []
        var refused: String?
        var kept: KeptSchedule?
        var backoff: SharedBackoff?
        var turnQueue: [TurnWaiter] = []
        /// The fence the last sign-out made (0: none since the entry was made): the entry is signed out while it is
        /// still the fence, and a refresh that started under an older one was dropped by a sign-out.
        var signedOutUnder: UInt64 = 0
        var reservedWrites: Int32 = 0
        var lateWrites: Int32 = 0
        /// The views of the holders beyond ``Entry``'s first.
        var otherViews: [WeakView] = []
        var current: StoredSession?
        var bornFence: UInt64?
        var turn: UInt64?
        var unwritten = false
        var retrying = false
        var fencingWrite = false

        init() {}

        /// Nothing pending and no write loop running: the entry can go once nobody holds it.
        var isIdle: Bool { !hasPendingWork && !retrying }

        /// Whether it keeps nothing beyond a sign-in of `credentials` that landed: nothing pending, queued, refused,
        /// backed off, kept for the write loop or remembered of a refresh, no second view, and `credentials` the
        /// newest (see ``Entry/settleSignIn(fence:holding:)``).
        func keepsOnlyALandedSignIn(of credentials: Credentials?) -> Bool {
            isIdle && !fencingWrite && rotations.isEmpty && refused == nil && backoff == nil && kept == nil
                && otherViews.isEmpty && current?.refreshTokenRefused != true && current?.credentials == credentials
        }

        /// Whether a refresh is in flight, or a write is owed, held, queued or reserved (a refusal to record, a late
        /// landing to repair): what a session with it must not be evicted for, and what a process shutting down
        /// waits for.
        var hasPendingWork: Bool {
            !flights.isEmpty || unwritten || reservedWrites > 0 || lateWrites > 0 || turn != nil || !turnQueue.isEmpty
        }
    }

    /// A ``Schedule`` the entry keeps for its write loop, in an object of its own: an entry keeps one only while it
    /// owes a write, so the detail of every other entry holds a word for it instead of the schedule.
    final class KeptSchedule {
        let schedule: Schedule
        init(_ schedule: Schedule) { self.schedule = schedule }
    }

    /// The backoff of the last refresh of the newest credentials, which failed for a while (the server or the
    /// network was down): every holder of them backs off with it (``CredentialsLedger/BackoffTerms``).
    final class SharedBackoff {
        /// The refresh token the failed refresh sent.
        let sent: String
        let backoff: FlightMachine.Backoff
        init(sent: String, backoff: FlightMachine.Backoff) {
            self.sent = sent
            self.backoff = backoff
        }
    }

    /// A view held weakly (a controller that is gone is skipped).
    struct WeakView {
        weak var view: AnyObject?
    }

    /// A caller that joined the refresh in flight for the token it presents.
    typealias Joiner = Parked<Result<Credentials, UserSessionError>, Never>

    /// The refresh a caller leads, as its leader keeps it: the entry's ``SingleFlight`` (keyed by the refresh token
    /// presented) keeps only who joined.
    struct Flight {
        /// The credentials it presented, and their refresh token.
        let presented: Credentials
        let sent: String
        /// The fence its caller writes under (``RefreshStateMachine/signingInFence`` for a session still signing
        /// in): a sign-out since makes its result unwritable.
        let fence: UInt64
        /// The entry's own fence when it started: a sign-out of the user while it ran dropped its result, which is
        /// then revoked (``refreshTakingTurn(identifier:userInfo:credentials:fence:heldFence:takingTurn:backoff:revokingDropped:call:)``).
        let startedUnder: UInt64
        /// It presented the identifier's newest credentials when it started (what the ledger held as current, or,
        /// with none, credentials read under the fence that holds): if they are not the newest when it returns,
        /// another write replaced them meanwhile.
        let presentedNewest: Bool
    }

    /// When the ledger retries an unwritten rotation, and whom it tells when a retry fails.
    struct Schedule: Sendable {
        var clock: SessionClock
        var policy: RefreshStateMachine.Policy
        /// Told (after the lock is released) that a retry failed: the session whose write failed last reports it
        /// while it is open (`.persistenceFailed`).
        var reportFailure: @Sendable (any Error) -> Void = { _ in }
    }

    private func modify<Value>(_ key: ExactIdentifier, _ body: (inout Entry) -> Value) -> Value {
        #if DEBUG
        sectionsTaken.wrappingAdd(1, ordering: .relaxed)
        #endif
        var settled: [Parked<Void, Never>] = []
        let value = entries.withLock { entries in
            var entry = entries[key] ?? Entry(fence: Self.nextFence())
            let value = body(&entry)
            // Whoever waits for the entry to settle is resumed by the section that settled it, after the lock.
            if settleWaiting.load(ordering: .relaxed) > 0, !entry.hasPendingWork,
                let waiting = settleWaiters.withLock({ $0.removeValue(forKey: key) })
            {
                settleWaiting.subtract(waiting.count, ordering: .relaxed)
                settled = waiting
            }
            entries[key] = entry.isIdle ? nil : entry
            return value
        }
        for waiter in settled { waiter.resume() }
        return value
    }

    /// How many identifiers the ledger holds an entry for (a probe for tests and the benchmark).
    var entryCount: Int { entries.withLock { $0.count } }

    /// Whether the entry of `identifier` keeps a ``Detail`` (a probe for tests).
    func keepsDetail(_ identifier: String) -> Bool {
        entries.withLock { $0[ExactIdentifier(identifier)]?.keepsDetail ?? false }
    }

    /// How many callers wait for `identifier`'s refresh in flight besides the one running it (a probe).
    func joinedWaiters(_ identifier: String) -> Int {
        entries.withLock { entries in
            entries[ExactIdentifier(identifier)]?.flights.waiterCount ?? 0
        }
    }

    /// Whether a refresh of `identifier` that this ledger leads is in flight (for tests).
    func isRefreshing(_ identifier: String) -> Bool {
        entries.withLock { entries in
            entries[ExactIdentifier(identifier)].map { !$0.flights.isEmpty } ?? false
        }
    }

    // MARK: - Holding

    /// A controller (or a restore in progress) holds `identifier`; returns the fence its writes are taken under.
    /// `view`, the holder's controller, is told when another holder's refresh or update advances the newest
    /// credentials (``CredentialsLedgerView/ledgerAdvanced(_:)``) until it lets go.
    ///
    /// Not inlined, like ``readThrough(_:identifier:fence:)``: a restore's async frame need not hold the critical
    /// section's temporaries (a frame that outgrows the task's slab costs an allocation).
    @discardableResult
    @inline(never)
    func hold(_ identifier: String, view: (any CredentialsLedgerView)? = nil) -> UInt64 {
        modify(ExactIdentifier(identifier)) { entry in
            entry.holders += 1
            if let view { entry.addView(view) }
            return entry.fence
        }
    }

    /// The holder of `identifier` let it go; a rotation nobody could write stays and is written on `schedule` (or
    /// the schedule of the write that failed last). `schedule` is made only then: most releases find nothing
    /// unwritten, and a schedule's failure report is a closure, an allocation per release otherwise. It runs inside
    /// the ledger's critical section, so it must only build the value (no lock, no user code).
    func release(
        _ identifier: String, view: (any CredentialsLedgerView)? = nil, schedule: @autoclosure () -> Schedule? = nil
    ) {
        let start = modify(ExactIdentifier(identifier)) { entry -> Bool in
            entry.holders = max(0, entry.holders - 1)
            if let view { entry.removeView(view) }
            if entry.unwritten { entry.keepSchedule(schedule()) }
            return startLoopIfNeeded(&entry)
        }
        if start { startWriteLoop(identifier) }
    }

    /// The credentials of `identifier` the store has not taken, if any: what a closing session writes one last
    /// time before it lets the identifier go.
    func unwrittenSession(_ identifier: String) -> StoredSession? {
        entries.withLock { entries in
            guard let entry = entries[ExactIdentifier(identifier)], entry.unwritten else { return nil }
            return entry.current
        }
    }

    /// Whether nothing holds or waits for `identifier`'s write turn and the store lacks none of its credentials: a
    /// closing session's last flush would find nothing to wait for and nothing to write. One critical section.
    func isSettled(_ identifier: String) -> Bool {
        entries.withLock { entries in
            guard let entry = entries[ExactIdentifier(identifier)] else { return true }
            return entry.turn == nil && entry.turnQueue.isEmpty && !entry.unwritten
        }
    }

    /// Whether a refresh known here spent `token` of `identifier`: a stored record holding it is older than any
    /// credentials reached from it, so a conditional write of those may replace it.
    func knowsSpent(_ token: String, of identifier: String) -> Bool {
        entries.withLock { entries in entries[ExactIdentifier(identifier)]?.isSpent(token) ?? false }
    }

    /// Whether a refresh known here replaced `credentials` of `key` (by refresh token when the server rotated it, by
    /// the very credentials when it did not): a stored record holding them is older than what the ledger writes
    /// over it. The write loop's and a refusal's conditions over the record they replace.
    private func knowsReplaced(_ credentials: Credentials, of key: ExactIdentifier) -> Bool {
        entries.withLock { $0[key]?.latestRotation(of: credentials) } != nil
    }

    /// Whether `identifier` has a refresh in flight or an unwritten rotation: such a session is never evicted.
    func hasPendingWork(_ identifier: String) -> Bool {
        entries.withLock { entries in entries[ExactIdentifier(identifier)]?.hasPendingWork ?? false }
    }

    /// The identifiers that have a refresh in flight or a write owed (``hasPendingWork(_:)``) now.
    func identifiersWithPendingWork() -> [String] {
        entries.withLock { entries in entries.filter(\.value.hasPendingWork).map(\.key.value) }
    }

    /// Waits, at most `timeout` on `clock`, until `identifier` has nothing in flight and nothing owed to the store:
    /// its refreshes returned and what they rotated was written (or the fence that made it unwritable changed). What
    /// a process waits for before it exits, so that the next one does not restore a refresh token the server rotated
    /// since. Returns whether it settled in time. A store that stays down, or a refresh that never returns, outlasts
    /// the deadline: the wait is then left behind, and ends when the entry settles.
    func settled(_ identifier: String, within timeout: Duration, clock: DeadlineClock) async -> Bool {
        let settling = Task { await settled(identifier) }
        return await Deadline.wait(for: settling, timeout: timeout, clock: clock)
    }

    /// ``settled(_:within:clock:)`` without a deadline: the caller puts one on it.
    func settled(_ identifier: String) async {
        let key = ExactIdentifier(identifier)
        await Parked.wait { (caller: Parked<Void, Never>) -> Void? in
            entries.withLock { entries -> Void? in
                guard entries[key]?.hasPendingWork == true else { return () }
                // Resumed by the section that settles the entry (``modify(_:_:)``).
                settleWaiters.withLock { $0[key, default: []].append(caller) }
                settleWaiting.add(1, ordering: .relaxed)
                return nil
            }
        }
    }

    /// The newest credentials of `identifier` this process knows (a refresh's result, a sign-in's, a landed write's or
    /// an adopted record's), if the entry holds any: what a sign-out revokes first, since the store or a session's
    /// copy may hold an older version (``SignOutRevocation/run(refresher:credentials:newest:identifier:store:configuration:)``).
    func newest(_ identifier: String) -> Credentials? {
        entries.withLock { entries in entries[ExactIdentifier(identifier)]?.current?.credentials }
    }

    /// Whether a caller waits for `identifier` to settle (a probe for tests).
    func awaitsSettlement(_ identifier: String) -> Bool {
        settleWaiters.withLock { $0[ExactIdentifier(identifier)]?.isEmpty == false }
    }

    /// What a shutdown reports when an identifier did not settle within `timeout` (``settled(_:within:clock:)``).
    static func unsettledAtShutdown(_ timeout: Duration) -> String {
        "shut down with a refresh or a write of the credentials unfinished after \(timeout); they are lost if the "
            + "process exits now"
    }

    /// The fence of `identifier` now (a new entry if none exists: its fence matches nothing older).
    func fence(_ identifier: String) -> UInt64 {
        entries.withLock { entries in entries[ExactIdentifier(identifier)]?.fence } ?? 0
    }

    /// Whether `credentials` are `identifier`'s newest here, not in the store yet, under `fence` (still the entry's):
    /// the write loop's to write, on the schedule of failed writes. One read of the entry.
    func holdsUnwritten(_ identifier: String, _ credentials: Credentials, fence: UInt64) -> Bool {
        entries.withLock { entries in
            entries[ExactIdentifier(identifier)].map {
                $0.fence == fence && $0.unwritten && $0.current?.credentials == credentials
            } ?? false
        }
    }

    // MARK: - Reading through

    /// What a restore of `identifier` that read `stored` while holding the identifier under `fence` must use
    /// instead: the unwritten rotation when the store still holds a refresh token it spent.
    ///
    /// Returns `nil` when a sign-in or a sign-out of `identifier` changed the fence since `fence` was taken, or is
    /// under way: `stored` may come from either side of it, and the session would be fenced against its own record
    /// (its rotations never written). The restore then reads again in the write turn, where none can interleave.
    ///
    /// - Throws: ``UserSessionError/Code/refreshTokenRefused`` when the stored refresh token was refused for good
    ///   (recorded here or in the store).
    @inline(never)
    func readThrough(_ stored: StoredSession, identifier: String, fence: UInt64) throws -> StoredSession? {
        // `nil`: a sign-in or a sign-out raced the read.
        let answer = entries.withLock { entries -> StoredSession? in
            guard let entry = entries[ExactIdentifier(identifier)] else { return stored }
            guard entry.fence == fence, !entry.fencingWrite else { return nil }
            guard let credentials = stored.credentials else { return stored }
            switch entry.known(credentials) {
            case .refused: return stored.markedRefused()
            case .rotated(let rotated, _): return StoredSession(userInfo: stored.userInfo, credentials: rotated)
            case nil: return stored
            }
        }
        guard let read = answer else { return nil }
        if read.refreshTokenRefused { throw Self.refusedError }
        return read
    }

    /// The session asking was closed before its refresh sent anything, and nobody holds the identifier since.
    static let releasedError = UserSessionError(
        .sessionNotOpen, "the session ended before its refresh was sent", failureClass: .cancelled)

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
    /// still refresh what it serves, but its result is neither recorded here nor written. `heldFence` is the fence
    /// that session holds the identifier under, when it writes under another (a session whose sign-in has not
    /// landed writes under ``RefreshStateMachine/signingInFence``); the refresh leads only on the entry it was taken
    /// from.
    ///
    /// A rotation the ledger recorded stays unwritten (and its entry alive) until a write in the identifier's
    /// write turn lands it: the caller's commit, or the ledger's own write loop once no controller holds it.
    func refresh(
        identifier: String, userInfo: UserInfo, credentials: Credentials, fence: UInt64, heldFence: UInt64? = nil,
        call: () async -> Result<Credentials, UserSessionError>
    ) async -> Result<Credentials, UserSessionError> {
        await refreshTakingTurn(
            identifier: identifier, userInfo: userInfo, credentials: credentials, fence: fence, heldFence: heldFence,
            takingTurn: false, call: call
        ).result
    }

    /// ``refresh(identifier:userInfo:credentials:fence:heldFence:call:)`` for a caller that commits what it leads: with
    /// `takingTurn`, the refresh it ran that succeeded also takes the identifier's write turn when it is free, in
    /// the critical section that records the rotation, and returns it (the caller writes the rotation in it and
    /// leaves it). Joined, answered and failed refreshes take no turn.
    ///
    /// A refresh it ran whose result a sign-out of the user dropped while it ran (the user signed out here, or the
    /// record was found removed elsewhere) is handed to `revokingDropped` once the lock is released: the sign-out
    /// revoked what the session held, which this refresh had spent already, and a server that ignores the revocation
    /// of a spent refresh token (RFC 7009 allows it) would otherwise keep the grant alive with tokens nobody holds.
    func refreshTakingTurn(
        identifier: String, userInfo: UserInfo, credentials: Credentials, fence: UInt64, heldFence: UInt64? = nil,
        takingTurn: Bool, backoff terms: BackoffTerms? = nil,
        revokingDropped revoke: (@Sendable (Credentials) -> Void)? = nil,
        call: () async -> Result<Credentials, UserSessionError>
    ) async -> (result: Result<Credentials, UserSessionError>, turn: TurnGrant?) {
        guard let sent = credentials.refreshToken else { return (await call(), nil) }
        let key = ExactIdentifier(identifier)
        // The clock is the session's (its code may be the application's): read before the lock, as after the call.
        let askedAt = terms.map { $0.clock.nowSeconds() }
        let asked = refreshAsked(
            key, credentials: credentials, sent: sent, fence: fence, heldFence: heldFence ?? fence, askedAt: askedAt,
            terms)
        switch asked {
        case .answered(let result):
            return (result, nil)
        case .join:
            return (await joinFlight(key, sent: sent, identifier: identifier, userInfo, credentials), nil)
        case .run(let flight):
            let result = await call()
            // A failure for a while backs off every holder, from this moment (read outside the lock, as above).
            var failedAt: Double?
            if let terms, case .failure(let error) = result, error.failureClass == .transient {
                failedAt = terms.clock.nowSeconds()
            }
            let landing = refreshLanded(
                key, flight, userInfo: userInfo, result: result, backoff: terms, failedAt: failedAt,
                takingTurn: takingTurn)
            landing.waiters.forEachWaiting { $0.resume(returning: result) }
            for view in landing.views { view.ledgerAdvanced(identifier) }
            if landing.droppedBySignOut, let revoke, case .success(let dropped) = result { revoke(dropped) }
            if let refusalFence = landing.refusalFence {
                await recordRefusalInStore(identifier: identifier, fence: refusalFence)
            }
            return (result, landing.turn)
        }
    }

    /// Waits for the refresh of `sent` in flight, and returns its result (asked again when it ended before the
    /// caller joined).
    private func joinFlight(
        _ key: ExactIdentifier, sent: String, identifier: String, _ userInfo: UserInfo, _ credentials: Credentials
    ) async -> Result<Credentials, UserSessionError> {
        await Parked.wait { (joiner: Joiner) -> Result<Credentials, UserSessionError>? in
            let joined = modify(key) { entry -> Bool in
                entry.flights.join(sent, id: Self.nextFence(), joiner)
            }
            // The flight ended between the two critical sections: ask again.
            if !joined {
                Task { joiner.resume(returning: await self.refreshAgain(identifier, userInfo, credentials)) }
            }
            return nil
        }
    }

    /// What a refresh asked of the entry gets (``refreshAsked(_:credentials:sent:fence:heldFence:askedAt:_:)``).
    private enum RefreshStep {
        /// Answered without a refresh: the rotation known, a refusal, a backoff, or a session released since.
        case answered(Result<Credentials, UserSessionError>)
        /// The refresh of the same token in flight is joined.
        case join
        /// The caller leads the refresh.
        case run(Flight)
    }

    /// The first critical section of a refresh of `credentials` (which sends `sent`), asked at `askedAt` by a
    /// session writing under `fence` and holding the identifier under `heldFence`: answered, joined or led. Not
    /// inlined, like ``refreshLanded(_:_:userInfo:result:backoff:failedAt:takingTurn:)``: the refresh's async frame
    /// need not hold the section's temporaries.
    @inline(never)
    private func refreshAsked(
        _ key: ExactIdentifier, credentials: Credentials, sent: String, fence: UInt64, heldFence: UInt64,
        askedAt: Double?, _ terms: BackoffTerms?
    ) -> RefreshStep {
        modify(key) { entry -> RefreshStep in
            switch entry.known(credentials) {
            case .refused: return .answered(.failure(Self.refusedError))
            case .rotated(let rotated, _): return .answered(.success(rotated))
            case nil: break
            }
            if entry.flights.isRunning(sent) { return .join }
            // Another holder's refresh of these credentials failed a moment ago: this one fails with it, unsent,
            // until the backoff is over (a holder told of it serves a still-valid token meanwhile instead).
            if let askedAt, terms?.stopsRequest == true, let backoff = entry.backoff(sending: sent),
                askedAt < backoff.retryAt
            {
                return .answered(.failure(backoff.lastFailure))
            }
            // Only a session that held the identifier through this entry's life leads a refresh: a held fence older
            // than the entry's birth means the entry was dropped since, so nobody held it after that session let go.
            // Its refresh, which outlived it and has sent nothing yet, must not send now: its rotation would belong
            // to nobody (fenced, unwritten, forgotten with the entry) while the store keeps the token it spent. The
            // held fence, not the write fence: a session still signing in writes under fence 0, and its refresh
            // leads only while it holds the entry (its result is fenced, and its own commit writes it once the
            // sign-in landed).
            guard heldFence >= entry.bornFence else {
                return .answered(.failure(Self.releasedError))
            }
            _ = entry.flights.lead(sent)
            let presentedNewest = entry.current.map { $0.credentials == credentials } ?? (entry.fence == fence)
            return .run(
                Flight(
                    presented: credentials, sent: sent, fence: fence, startedUnder: entry.fence,
                    presentedNewest: presentedNewest))
        }
    }

    /// What the second critical section of a led refresh hands its caller to do once the lock is released.
    private struct RefreshLanding {
        /// The callers that joined it, to resume with its result.
        var waiters: FlightWaiters<Joiner>
        /// The fence a refusal to record in the store is written under, if any.
        var refusalFence: UInt64?
        /// The write turn, when the caller takes it for its commit.
        var turn: TurnGrant?
        /// The views to tell (``CredentialsLedgerView/ledgerAdvanced(_:)``).
        var views: [any CredentialsLedgerView]
        /// The refresh succeeded, and a sign-out of the user since it started dropped its result.
        var droppedBySignOut = false
    }

    /// The second critical section of a refresh the caller led: `flight` returned `result` (at `failedAt`, when it
    /// failed for a while and the caller shares its backoff on `terms`). Records it, and with `takingTurn` grants the
    /// write turn to a success when it is free. Not inlined, like
    /// ``refreshAsked(_:credentials:sent:fence:heldFence:askedAt:_:)``.
    @inline(never)
    private func refreshLanded(
        _ key: ExactIdentifier, _ flight: Flight, userInfo: UserInfo, result: Result<Credentials, UserSessionError>,
        backoff terms: BackoffTerms?, failedAt: Double?, takingTurn: Bool
    ) -> RefreshLanding {
        modify(key) { entry in
            var backedOff: FlightMachine.Backoff?
            if let terms, let failedAt, case .failure(let failure) = result {
                backedOff = keepBackoff(&entry, flight: flight, failure: failure, at: failedAt, terms)
            }
            let (waiters, refusalFence, replaced) = flightReturned(
                &entry, flight: flight, userInfo: userInfo, result: result)
            // A refresh of credentials another write replaced while it ran gets no turn: knowledge only, its
            // commit leaves the turn it waits for without writing (`leaveIfNothingToWrite`).
            let succeeded = (try? result.get()) != nil
            let turn = takingTurn && entry.turn == nil && succeeded && !replaced ? entry.grantTurn() : nil
            // A refusal is told to every view over any store: it takes no revision, only the session's end. So
            // is a backoff: no store holds it.
            var told: [any CredentialsLedgerView] = []
            if refusalFence != nil {
                told = entry.views
            } else if backedOff != nil {
                told = entry.viewsToTell
            } else if advanced(entry, to: result) {
                told = viewsToTell(entry)
            }
            // Signed out while it ran (not before it started: a session signing in refreshes over an entry whose last
            // sign-out came before its sign-in), whether or not a sign-in followed.
            let dropped = succeeded && entry.signedOut(after: flight.startedUnder)
            return RefreshLanding(
                waiters: waiters, refusalFence: refusalFence, turn: turn, views: told, droppedBySignOut: dropped)
        }
    }

    /// What a refresh needs to share the backoff of its failure with every holder of the identifier's credentials:
    /// the asking session's clock and retry policy, and whether a backoff kept for the credentials stops its request
    /// (not a forced refresh's, as the session's own backoff never stops one).
    struct BackoffTerms {
        var clock: SessionClock
        var policy: RefreshStateMachine.Policy
        var stopsRequest: Bool
    }

    /// After a refresh of the newest credentials failed for a while (transiently, with `failure`) at `now`: the entry
    /// keeps its backoff, counting on from the one it kept for the same refresh token, and returns it. `nil` for a
    /// refresh of credentials that are not the newest any more.
    private func keepBackoff(
        _ entry: inout Entry, flight: Flight, failure: UserSessionError, at now: Double, _ terms: BackoffTerms
    ) -> FlightMachine.Backoff? {
        guard presentsNewest(entry, flight) else { return nil }
        let failures = (entry.backoff(sending: flight.sent)?.failures ?? 0) + 1
        let backoff = FlightMachine.Backoff(
            failures: failures, retryAt: now + terms.policy.backoff(attempt: failures, jitter: .random(in: 0...1)),
            lastFailure: failure, blocksAutomaticRefresh: false)
        entry.backoff = SharedBackoff(sent: flight.sent, backoff: backoff)
        return backoff
    }

    /// Whether `flight` refreshed the identifier's newest credentials: what the ledger holds as current (even one
    /// taken under an older fence: a refresh of the credentials a sign-in just wrote, its session still signing in
    /// when it started), or, when it holds none, what was read under the fence that still holds.
    private func presentsNewest(_ entry: Entry, _ flight: Flight) -> Bool {
        entry.current.map { $0.credentials == flight.presented } ?? (entry.fence == flight.fence)
    }

    /// Whether `result`, a refresh that just returned, is now the identifier's newest credentials, to tell the views
    /// holding it: each view then takes it instead of presenting a refresh token it spent, however long it stays idle
    /// (the rotations the ledger remembers are a bounded window). A refusal of the newest is told too, over any
    /// store: each view holding them ends its session (``news(of:identifier:fence:)``).
    private func advanced(_ entry: Entry, to result: Result<Credentials, UserSessionError>) -> Bool {
        guard case .success(let credentials) = result else { return false }
        return entry.current?.credentials == credentials
    }

    /// The views to tell that `entry`'s newest credentials changed (``Entry/viewsToTell``), over a plain store only.
    /// Over a coordinated store a view takes what another holder wrote from the record instead, with the revision its
    /// own conditional writes need (its change subscription, or its next leased flight's first read).
    private func viewsToTell(_ entry: Entry) -> [any CredentialsLedgerView] {
        coordinatedStore == nil ? entry.viewsToTell : []
    }

    /// What a view of `identifier`, told by ``CredentialsLedgerView/ledgerAdvanced(_:)``, must do, holding `held` (`nil`
    /// while it has a flight of its own, which the entry answers anyway) under `fence`. One critical section:
    /// - `.signedOut`: the user signed out since the view's fence (never for a session still signing in, whose sign-in
    ///   lands after, nor after a sign-in since); its session closes;
    /// - `.refused`: the newest credentials `held` leads to were refused for good; its session ends;
    /// - `.advanced`: the newest credentials the refreshes and replacements known here reached from `held`, and whether
    ///   refreshes alone led there (no credentials handed over or adopted on the way); it takes them;
    /// - `nil`: nothing to do (`held` are the newest known, or the fence changed by a sign-in, or one is under way).
    func news(of held: Credentials?, identifier: String, fence: UInt64) -> ViewNews? {
        entries.withLock { entries -> ViewNews? in
            guard let entry = entries[ExactIdentifier(identifier)], !entry.fencingWrite else { return nil }
            if entry.signedOut, entry.fence != fence, fence != RefreshStateMachine.signingInFence { return .signedOut }
            guard entry.fence == fence, let held else { return nil }
            switch entry.known(held) {
            case .refused: return .refused
            case .rotated(let newest, let refreshedOnly): return .advanced(newest, refreshedOnly: refreshedOnly)
            case nil: return entry.backoff(sending: held.refreshToken).map { .backedOff($0) }
            }
        }
    }

    /// What a view must do when told (``news(of:identifier:fence:)``).
    enum ViewNews: Equatable {
        case signedOut
        case refused
        case advanced(Credentials, refreshedOnly: Bool)
        /// A refresh of the credentials the view holds failed for a while: it backs off with the others.
        case backedOff(FlightMachine.Backoff)
    }

    /// The backoff the entry of `identifier` keeps for a refresh that sent `sent`, for a session whose own refresh
    /// of them failed transiently (it backs off with the others, not on a count of its own).
    func backoff(_ identifier: String, sending sent: String?) -> FlightMachine.Backoff? {
        entries.withLock { $0[ExactIdentifier(identifier)]?.backoff(sending: sent) }
    }

    /// Credentials handed over landed for `identifier` under `fence`: their landing mapped what they replaced (the
    /// ledger's own newest, when it knew one, and what the session that handed them over held) to them
    /// (``writeFinished(_:fence:wrote:replacing:failed:schedule:turn:leavesTurn:)``). Returns the views to tell once
    /// the caller released its locks: each view holding what they replaced takes them.
    func updated(_ identifier: String, fence: UInt64) -> [any CredentialsLedgerView] {
        modify(ExactIdentifier(identifier)) { entry in
            guard entry.fence == fence else { return [] }
            return viewsToTell(entry)
        }
    }

    private func refreshAgain(_ identifier: String, _ userInfo: UserInfo, _ credentials: Credentials) async
        -> Result<Credentials, UserSessionError>
    {
        let key = ExactIdentifier(identifier)
        let answer = modify(key) { entry -> Result<Credentials, UserSessionError>? in
            switch entry.known(credentials) {
            case .refused: return .failure(Self.refusedError)
            case .rotated(let rotated, _): return .success(rotated)
            case nil: return nil
            }
        }
        return answer
            ?? .failure(
                UserSessionError(
                    .refreshFailed, "the shared refresh ended without a result", failureClass: .transient))
    }

    /// The refresh `flight` returned `result`: records the rotation as unwritten (unless the identifier signed out
    /// or in since), or records the refusal, whose record is then unwritten. Returns the joined waiters, for a
    /// refusal to record in the store the fence it is written under, and whether the refresh presented the newest
    /// credentials and another write replaced them before it returned (its result is knowledge only).
    private func flightReturned(
        _ entry: inout Entry, flight: Flight, userInfo: UserInfo, result: Result<Credentials, UserSessionError>
    ) -> (FlightWaiters<Joiner>, UInt64?, Bool) {
        let waiters = entry.flights.land(flight.sent)
        // The result is the identifier's newest when the refresh refreshed the newest (`presentsNewest`). A refresh
        // of credentials an update, a sign-in or a sign-out replaced since is knowledge only.
        let fenced = !presentsNewest(entry, flight)
        switch result {
        case .success(let credentials):
            let replaced = fenced && flight.presentedNewest
            entry.recordRefresh(of: flight.presented, sent: flight.sent, result: credentials)
            if replaced, entry.fence == flight.fence, let newest = entry.current?.credentials {
                // Replaced while it ran within the same sign-in (an update): its result is older than what replaced
                // it, so its holder is handed that. Never across a sign-in: a session of an earlier one is not handed
                // the next one's credentials.
                entry.recordReplacement(of: credentials, by: newest)
            }
            guard !fenced else { return (waiters, nil, replaced) }
            entry.current = StoredSession(userInfo: userInfo, credentials: credentials)
            entry.unwritten = true
            entry.refused = nil
            entry.backoff = nil
            return (waiters, nil, false)
        case .failure(let error):
            guard error.failureClass == .terminal, error.code != .refreshTokenRefused, !fenced else {
                return (waiters, nil, false)
            }
            entry.refused = flight.sent
            // The refused credentials were the identifier's newest: their record, marked refused, is the newest now,
            // and unwritten like any write the store lacks (the entry keeps it, and the refusal, until it lands).
            let refusedRecord = entry.current ?? StoredSession(userInfo: userInfo, credentials: flight.presented)
            entry.current = refusedRecord.markedRefused()
            entry.unwritten = true
            return (waiters, entry.fence, false)
        }
    }

    /// Writes the refusal `flightReturned` made the identifier's newest record (its credentials, marked refused), so
    /// restores of every instance fail at once instead of presenting the refused token again. A write like any
    /// other: in the write turn, under `fence` (a sign-in since drops it), retried by the write loop until it lands.
    ///
    /// Written before the refresh's callers hear of it when the turn is free. When another write holds the turn (a
    /// sign-in whose write waits for the outcome of this very refresh, for one), it is written after that write, in
    /// the background: the refusal is already known to this process, and stays known until the store has it.
    ///
    /// Not inlined: the frame of every refresh need not hold this rare write's state.
    @inline(never)
    private func recordRefusalInStore(identifier: String, fence: UInt64) async {
        switch tryEnterWriteTurn(identifier, fence: fence, reserved: false) {
        case .granted(let turn):
            await rewriteNow(identifier, fence: fence, holding: turn.token)
        case .refused:
            return
        case .busy:
            Task { await self.rewriteNow(identifier, fence: fence) }
        }
    }

    /// The store call of a refusal's record (`session`, marked refused): it replaces only a record of the same
    /// credentials (the refused token, unmarked) or an older version of them (credentials a refresh known here
    /// replaced, as the write loop's conditional write recognizes them), so a record written elsewhere since
    /// (another instance's sign-in, or none) stands; already recorded, it is not written again. Conditional on the
    /// revision with a coordinated store.
    private func saveRefusal(_ session: StoredSession, identifier: String) async throws {
        let key = ExactIdentifier(identifier)
        let refused = session.credentials?.refreshToken
        func replaces(_ stored: StoredSession) -> Bool {
            guard let credentials = stored.credentials, let token = credentials.refreshToken else { return false }
            return token == refused || knowsReplaced(credentials, of: key)
        }
        let changedElsewhere = UserSessionError(.revisionConflict, "the record changed elsewhere")
        if let coordinatedStore {
            guard let record = try await coordinatedStore.loadRevised(identifier: identifier), replaces(record.session)
            else { throw changedElsewhere }
            if record.session.refreshTokenRefused, record.session.credentials?.refreshToken == refused { return }
            _ = try await coordinatedStore.save(session, identifier: identifier, expectedRevision: record.revision)
        } else {
            guard let stored = try await store.load(identifier: identifier), replaces(stored) else {
                throw changedElsewhere
            }
            if stored.refreshTokenRefused, stored.credentials?.refreshToken == refused { return }
            try await store.save(session, identifier: identifier)
        }
    }

    // MARK: - The write turn

    /// Waits for `identifier`'s write turn, for a write taken under `fence` (`nil`: unconditional). Returns the
    /// turn's token, which the caller passes back when it leaves the turn (``leaveWriteTurn(_:token:)``, or
    /// ``writeFinished(_:fence:wrote:schedule:turn:)``), or `nil` when the fence changed (a sign-out or a
    /// sign-in since): the write must not happen, and nothing is held.
    ///
    /// With `reserved`, the caller spends the reservation of a refusal to record on the way in.
    /// Turns are handed on in arrival order; a write waiting whose fence changed meanwhile is refused when its turn
    /// comes. One critical section when the turn is free.
    func enterWriteTurn(_ identifier: String, fence: UInt64?, reserved: Bool = false) async -> TurnGrant? {
        switch tryEnterWriteTurn(identifier, fence: fence, reserved: reserved) {
        case .granted(let token): return token
        case .refused: return nil
        case .busy: break
        }
        let key = ExactIdentifier(identifier)
        return await Parked.wait { (caller: Parked<TurnGrant?, Never>) -> TurnGrant?? in
            // Answered here when the turn was let go or the fence changed since the first look; queued otherwise.
            modify(key) { entry -> TurnGrant?? in
                if reserved { entry.reservedWrites = max(0, entry.reservedWrites - 1) }
                if let fence, entry.fence != fence { return .some(nil) }
                guard entry.turn != nil else { return .some(entry.grantTurn()) }
                entry.turnQueue.append(TurnWaiter(fence: fence, caller: caller))
                return .none
            }
        }
    }

    /// What a first look at the write turn found.
    enum TurnAttempt {
        /// The turn was free and is now held.
        case granted(TurnGrant)
        /// The fence changed: the write must not happen.
        case refused
        /// Another write holds the turn (a reservation is still held).
        case busy
    }

    /// Takes `identifier`'s write turn if it is free, without waiting (see ``enterWriteTurn(_:fence:reserved:)``).
    func tryEnterWriteTurn(_ identifier: String, fence: UInt64?, reserved: Bool) -> TurnAttempt {
        modify(ExactIdentifier(identifier)) { entry -> TurnAttempt in
            if let fence, entry.fence != fence {
                if reserved { entry.reservedWrites = max(0, entry.reservedWrites - 1) }
                return .refused
            }
            guard entry.turn == nil else { return .busy }
            if reserved { entry.reservedWrites = max(0, entry.reservedWrites - 1) }
            return .granted(entry.grantTurn())
        }
    }

    /// Leaves the write turn `token` holds, handing it to the next write waiting whose fence still holds. A holder
    /// that lost the turn to a close's deadline (``abandonWriteTurn(_:token:)``) only stops counting as late.
    func leaveWriteTurn(_ identifier: String, token: UInt64) {
        modify(ExactIdentifier(identifier)) { leave(&$0, turn: token) }.deliver()
    }

    /// The unconditional form of ``enterWriteTurn(_:fence:reserved:)``, for a holder that makes several writes (or
    /// reads it must order with them) and leaves with ``leaveWriteTurn(_:token:)``: always granted, in arrival order.
    func takeWriteTurn(_ identifier: String) async -> TurnGrant {
        guard let grant = await enterWriteTurn(identifier, fence: nil) else {
            preconditionFailure("an unconditional write turn was refused")
        }
        return grant
    }

    /// Takes the turn from the write holding it as `token`, which overran a close's deadline (the gate's
    /// `deactivate()`): the turn goes on, and the write counts as late until it lands
    /// (``writeFinished(_:fence:wrote:schedule:turn:)``).
    func abandonWriteTurn(_ identifier: String, token: UInt64) {
        modify(ExactIdentifier(identifier)) { entry -> Handover in
            guard entry.turn == token else { return Handover() }
            entry.lateWrites += 1
            return handOver(&entry, from: token)
        }.deliver()
    }

    /// Runs `body` in `identifier`'s write turn, if the fence is still `fence` when the turn comes (always when
    /// `fence` is `nil`); returns `nil` when it did not run.
    @discardableResult
    func withWriteTurn<Value>(
        _ identifier: String, fence: UInt64?, reserved: Bool = false, _ body: () async throws -> Value
    ) async rethrows -> Value? {
        guard let grant = await enterWriteTurn(identifier, fence: fence, reserved: reserved) else { return nil }
        defer { leaveWriteTurn(identifier, token: grant.token) }
        return try await body()
    }

    /// Runs `body`, a write of `identifier`'s record that holds no fence (a reseal of the stored record), in the
    /// identifier's write turn.
    func withWriteTurn<Value>(_ identifier: String, _ body: () async throws -> Value) async rethrows -> Value {
        let grant = await takeWriteTurn(identifier)
        defer { leaveWriteTurn(identifier, token: grant.token) }
        return try await body()
    }

    /// The waiters to resume once the turn was handed on, after the lock is released.
    struct Handover {
        var granted: (caller: Parked<TurnGrant?, Never>, grant: TurnGrant)?
        var refused: [Parked<TurnGrant?, Never>] = []

        func deliver() {
            for caller in refused { caller.resume(returning: nil) }
            if let (caller, grant) = granted { caller.resume(returning: grant) }
        }
    }

    /// The holder of `token` leaves the turn: ``handOver(_:from:)`` when it still holds it; when it lost it to a
    /// close's deadline (``abandonWriteTurn(_:token:)``), it only stops counting as late.
    private func leave(_ entry: inout Entry, turn token: UInt64) -> Handover {
        if entry.turn != token { entry.lateWrites = max(0, entry.lateWrites - 1) }
        return handOver(&entry, from: token)
    }

    /// Hands the turn `token` holds to the next waiting write whose fence still holds; nothing when `token` no
    /// longer holds it.
    private func handOver(_ entry: inout Entry, from token: UInt64) -> Handover {
        var handover = Handover()
        guard entry.turn == token else { return handover }
        while !entry.turnQueue.isEmpty {
            let next = entry.turnQueue.removeFirst()
            if let fence = next.fence, fence != entry.fence {
                handover.refused.append(next.caller)
                continue
            }
            handover.granted = (next.caller, entry.grantTurn())
            return handover
        }
        entry.turn = nil
        return handover
    }

    /// Whether a write holds `identifier`'s write turn (a probe for tests).
    func writeTurnIsHeld(_ identifier: String) -> Bool {
        entries.withLock { $0[ExactIdentifier(identifier)]?.turn != nil }
    }

    /// How many writes of `identifier` wait for its write turn (a probe for tests).
    func writersWaiting(_ identifier: String) -> Int {
        entries.withLock { $0[ExactIdentifier(identifier)]?.turnQueue.count ?? 0 }
    }

    // MARK: - Writes

    /// A write that holds the turn `turn` under `fence` finished (and, with `leavesTurn`, leaves it in the same critical
    /// section; otherwise its holder leaves it later with ``leaveWriteTurn(_:token:)``); `written` is what the store
    /// holds now as far as the write knows (what it wrote, or a newer record that superseded it), `failed` the
    /// session's own credentials it tried to write when the store refused them (credentials handed over whose write
    /// failed change nothing, and are not passed). Credentials handed over that landed name what they replaced
    /// (`replaced`, what their session held): it is mapped to them in this section, with the landing, so that no
    /// refresh of it can lead once they are in the store.
    ///
    /// The ledger owns "unwritten" for every write of the identifier, not only for the rotations it recorded: a
    /// write that failed under the fence leaves its credentials unwritten here unless something newer is known, and
    /// the write loop retries them. A write that lost its turn to a close's deadline and landed late never replaces
    /// newer credentials: they are written again at once. One that landed while another write held the turn cannot
    /// be ordered against it: it is repaired in the turn after that write (``repairLateLanding(_:fence:)``).
    ///
    /// A write that landed after a sign-out it did not wait for is undone: the ledger removes the record again
    /// (``removeAgain(_:fence:)``).
    func writeFinished(
        _ identifier: String, fence: UInt64, wrote written: StoredSession?, replacing replaced: Credentials? = nil,
        failed: StoredSession? = nil, schedule: Schedule? = nil, turn: UInt64, leavesTurn: Bool = false
    ) {
        enum Then {
            case nothing
            /// A write failed: the write loop retries it on the schedule.
            case retry
            /// A late write replaced newer credentials in the store: they are written again now.
            case rewrite
            /// A late write landed after a sign-out: the record is removed again, under the sign-out's fence.
            case remove(fence: UInt64)
            /// A late write landed while another write held the turn: repaired in the turn, after that write.
            case repairInTurn
        }
        /// What the landing calls for once the entry learned it.
        func landing(_ entry: inout Entry, late: Bool) -> Then {
            guard entry.fence == fence else {
                // Landed after a sign-out or a sign-in it did not wait for (one that came from the store, or a write
                // that lost its turn to a close's deadline). After a sign-out it is undone; after a sign-in, the
                // newest credentials of the identifier (the sign-in's, or what came of them) are written again.
                guard written != nil else { return .nothing }
                if entry.signedOut {
                    entry.reservedWrites += 1
                    return .remove(fence: entry.fence)
                }
                guard entry.current != nil else { return .nothing }
                entry.unwritten = true
                entry.keepSchedule(schedule)
                return .rewrite
            }
            if let written {
                landed(&entry, written, late: late)
                // Credentials handed over: whoever holds what they replaced is handed them, from this very section
                // (`recordReplacement` ignores the same version).
                if let replaced, let credentials = written.credentials {
                    entry.recordReplacement(of: replaced, by: credentials)
                }
                // Still unwritten after a landing: an older version landed over the newest.
                guard entry.unwritten else { return .nothing }
                entry.keepSchedule(schedule)
                return .rewrite
            }
            guard let failed else { return .nothing }
            notLanded(&entry, failed)
            // The writer that failed last is the one that reports the retries.
            if let schedule { entry.schedule = schedule }
            return startLoopIfNeeded(&entry) ? .retry : .nothing
        }
        let (then, handover) = modify(ExactIdentifier(identifier)) { entry -> (Then, Handover) in
            // A write that no longer holds its turn lost it to a close's deadline: it landed late.
            let late = entry.turn != turn
            let then: Then
            if late, written != nil, entry.turn != nil {
                // Another write holds the turn, and its store call may have come before or after this one: what it
                // changes is known only once it returns. Judged in the turn after it (`repairLateLanding`); the
                // reservation keeps the entry until the repair is in the turn.
                entry.reservedWrites += 1
                entry.keepSchedule(schedule)
                then = .repairInTurn
            } else {
                then = landing(&entry, late: late)
            }
            let handover = leavesTurn ? leave(&entry, turn: turn) : Handover()
            return (then, handover)
        }
        handover.deliver()
        switch then {
        case .nothing: break
        case .retry: startWriteLoop(identifier)
        case .rewrite: Task { await self.rewriteNow(identifier) }
        case .remove(let fence): Task { await self.removeAgain(identifier, fence: fence) }
        case .repairInTurn: Task { await self.repairLateLanding(identifier, fence: fence) }
        }
    }

    /// Repairs the landing of a write taken under `fence` that lost its turn and landed while another write held
    /// the turn (a sign-in's or a sign-out's store call, another controller's commit, the ledger's own write): the
    /// two cannot be ordered, so the late write may have landed over that one. The repair is a write in the turn
    /// like any other, queued behind that write, and judged against what the entry knows when its turn comes,
    /// every write before it landed: after a sign-out the late write came before, the record is removed again
    /// (under the sign-out's fence: the turn is held, so no sign-in comes between); otherwise the newest
    /// credentials are unwritten and written again now (a failure leaves them to the write loop). Repairing when
    /// the order is unknown costs one store call at most: the newest written again, or a record removed again.
    private func repairLateLanding(_ identifier: String, fence: UInt64) async {
        enum Repair {
            case remove
            case rewrite
        }
        let key = ExactIdentifier(identifier)
        // Unconditional, so never refused; spends the reservation made when the late write landed.
        guard let grant = await enterWriteTurn(identifier, fence: nil, reserved: true) else { return }
        let (repair, handover) = modify(key) { entry -> (Repair?, Handover) in
            if entry.signedOut, entry.fence != fence { return (.remove, Handover()) }
            guard entry.current != nil else { return (nil, handOver(&entry, from: grant.token)) }
            entry.unwritten = true
            return (.rewrite, Handover())
        }
        handover.deliver()
        switch repair {
        case nil:
            return
        case .remove:
            try? await store.remove(identifier: identifier)
            leaveWriteTurn(identifier, token: grant.token)
        case .rewrite:
            await rewriteNow(identifier, fence: grant.fence, holding: grant.token)
        }
    }

    /// A commit holding `turn` that waited for it asks whether it has anything to write. Nothing when the store
    /// already holds exactly `session`: the refresh was another controller's (joined, or answered with its
    /// rotation), and that controller's write landed it under the turn's fence with nothing unwritten since
    /// (``Entry/hasLanded(_:)``). Nothing either when the entry knows newer credentials reached from `session`'s, or
    /// their refusal (``Entry/isSuperseded(_:)``): an update of another controller replaced what the refresh
    /// presented while it ran, or another refresh already went on from its result. A commit never writes an older
    /// version over the newest. Then it leaves the turn in the same critical section and says which: the commit
    /// publishes without writing. Otherwise it returns `nil` and the caller still holds the turn, to write. A
    /// refresh made while its session was signing in presented nothing the ledger held as the newest, and is written
    /// once the sign-in landed.
    ///
    /// Only for an unconditional write: a session over a ``CoordinatedTokenStore`` would also need the revision the
    /// write made, which the entry does not keep.
    func leaveIfNothingToWrite(_ identifier: String, _ session: StoredSession, turn: TurnGrant) -> NothingToWrite? {
        let left = modify(ExactIdentifier(identifier)) { entry -> (NothingToWrite, Handover)? in
            guard entry.turn == turn.token, entry.fence == turn.fence else { return nil }
            let why: NothingToWrite
            if entry.hasLanded(session) {
                why = .landed
            } else if entry.isSuperseded(session) {
                why = .superseded
            } else {
                return nil
            }
            return (why, handOver(&entry, from: turn.token))
        }
        left?.1.deliver()
        return left?.0
    }

    /// Why a commit has nothing to write (``leaveIfNothingToWrite(_:_:turn:)``).
    enum NothingToWrite {
        /// The store holds its very record already.
        case landed
        /// The entry knows newer credentials (or their refusal): the commit's session takes them after publishing.
        case superseded
    }

    /// A session of `identifier` holding the write turn `turn` adopts `session`, which it read from the store in
    /// that turn (another instance stored it): the store told this process what it holds, and the ledger learns it
    /// as it learns a write that landed (``landed(_:_:late:)``), under `fence`, the adopting session's fence. The
    /// adopted credentials are then the identifier's newest known here, so a refresh of them is a refresh of the
    /// newest: its rotation is written (by the ledger when its session ended meanwhile) and its refusal recorded.
    ///
    /// Nothing is learned when the fence is no longer `fence` (a sign-in or a sign-out since: the session adopts for
    /// itself alone) or the caller lost the turn to a close's deadline (writes since may be newer than its read). A
    /// record holding credentials a refresh known here replaced has the newest written again at once, on `schedule`
    /// when that fails (made only then, inside the critical section: it must only build the value).
    func adopted(
        _ identifier: String, _ session: StoredSession, fence: UInt64, turn: UInt64,
        schedule: @autoclosure () -> Schedule?
    ) {
        let rewrite = modify(ExactIdentifier(identifier)) { entry -> Bool in
            guard entry.fence == fence, entry.turn == turn else { return false }
            landed(&entry, session)
            guard entry.unwritten else { return false }
            entry.keepSchedule(schedule())
            return true
        }
        if rewrite { Task { await self.rewriteNow(identifier) } }
    }

    /// A session of `identifier` holding the write turn `turn` read `session` from the store in that turn, marked
    /// refused: another instance had its refresh token refused for good. The ledger learns the refusal as it learns
    /// one of this process (``flightReturned(_:flight:userInfo:result:)``): the refused token answers every later
    /// presentation at once, and the record, already in the store, is the newest. What it replaced (the newest known
    /// here, and `held`, what the reading session holds, when the other instance rotated them first) is answered with
    /// it, so whoever holds them is refused too. Returns every view to tell (each holding them ends its session):
    /// none when the fence is no longer `fence` or the caller lost the turn to a close's deadline.
    func refusedElsewhere(
        _ identifier: String, _ session: StoredSession, replacing held: Credentials?, fence: UInt64, turn: UInt64
    ) -> [any CredentialsLedgerView] {
        modify(ExactIdentifier(identifier)) { entry in
            guard entry.fence == fence, entry.turn == turn, let credentials = session.credentials,
                let token = credentials.refreshToken
            else { return [] }
            for replaced in [entry.current?.credentials, held].compactMap({ $0 }) where replaced != credentials {
                entry.recordReplacement(of: replaced, by: credentials)
            }
            entry.current = session
            entry.unwritten = false
            entry.refused = token
            return entry.views
        }
    }

    /// Removes `identifier`'s record once more: a write from before its sign-out landed after it. In the write turn,
    /// under the fence the sign-out made (a sign-in since is never removed), spending the reservation that kept the
    /// entry alive until now.
    private func removeAgain(_ identifier: String, fence: UInt64) async {
        await withWriteTurn(identifier, fence: fence, reserved: true) {
            try? await self.store.remove(identifier: identifier)
        }
    }

    /// `session` is in the store now: it is the identifier's newest credentials, unless a refresh known here
    /// replaced them or the write landed `late` (after writes that came after it): an older version landed after
    /// the newest, which must be written again.
    private func landed(_ entry: inout Entry, _ session: StoredSession, late: Bool = false) {
        guard let credentials = session.credentials else { return }
        if let current = entry.current, current.holdsSameTokens(as: credentials) {
            // The newest, unless the newest is the refusal of these credentials and this write lacked the mark.
            entry.unwritten = current.refreshTokenRefused && !session.refreshTokenRefused
        } else if entry.current != nil, late || entry.latestRotation(of: credentials) != nil {
            // An older version landed after the newest: the newest must be written again.
            entry.unwritten = true
        } else {
            // Credentials from elsewhere (an update, another instance), or the first the ledger learns of: the newest
            // now. A rotation they replaced still answers a controller presenting a token it spent, and the
            // credentials they replaced answer their holders with them.
            if let previous = entry.current?.credentials { entry.recordReplacement(of: previous, by: credentials) }
            entry.current = session
            entry.unwritten = false
        }
    }

    /// A write of `session` failed: the store may lack it. It becomes the rotation to write unless the ledger knows
    /// newer credentials reached from it (it is then an older version, and the newest is what must land), or their
    /// refusal (the record marked refused stays the one to write).
    private func notLanded(_ entry: inout Entry, _ session: StoredSession) {
        guard let credentials = session.credentials, entry.latestRotation(of: credentials) == nil else { return }
        if let current = entry.current, current.refreshTokenRefused, current.holdsSameTokens(as: credentials) {
            entry.unwritten = true
            return
        }
        entry.current = session
        entry.unwritten = true
    }

    /// The user signs in: `write` stores the sign-in's record in the identifier's write turn, and only once the
    /// store took it does the fence change (``signedIn(_:)``). Returns what `write` returned and the new fence; a
    /// sign-in the store refused changes nothing.
    func signIn<Value>(
        _ identifier: String, session: StoredSession? = nil, holdingTurn: Bool = false,
        write: () async throws -> Value
    ) async throws -> (Value, UInt64) {
        try await withFencingWrite(identifier, holdingTurn: holdingTurn, write) { $0.signIn(session) }
    }

    /// Runs `write`, the store call of a sign-in or a sign-out, in `identifier`'s write turn, marked as under way
    /// while it runs (a restore that read the record meanwhile may have read either side of it:
    /// ``readThrough(_:identifier:fence:)``); once the store took it, `landed` changes the entry (the new fence).
    /// Returns what both returned. A write the store refused changes nothing.
    ///
    /// Two critical sections of the entry, like a commit's, when the turn is free: one takes the turn and marks the
    /// write, one applies `landed`, clears the mark and hands the turn on. With `holdingTurn`, the caller already
    /// holds the turn and keeps it (a controller opening a session holds it from before the session's credentials
    /// are readable until its sign-in is written): the first section only marks the write.
    private func withFencingWrite<Value, Landed>(
        _ identifier: String, holdingTurn: Bool = false, _ write: () async throws -> Value,
        landed: (inout Entry) -> Landed
    ) async throws -> (Value, Landed) {
        let key = ExactIdentifier(identifier)
        var token: UInt64?
        if holdingTurn {
            modify(key) { $0.fencingWrite = true }
        } else {
            token = modify(key) { entry -> UInt64? in
                guard entry.turn == nil else { return nil }
                entry.fencingWrite = true
                return entry.grantTurn().token
            }
            if token == nil {
                // Busy: wait in line like any write, then mark it.
                token = await takeWriteTurn(identifier).token
                modify(key) { $0.fencingWrite = true }
            }
        }
        // Clears the mark and, unless the caller holds the turn, leaves it.
        func finish(_ entry: inout Entry) -> Handover {
            entry.fencingWrite = false
            guard let token else { return Handover() }
            return leave(&entry, turn: token)
        }
        let value: Value
        do {
            value = try await write()
        } catch {
            modify(key) { finish(&$0) }.deliver()
            throw error
        }
        let (result, handover) = modify(key) { entry in
            let result = landed(&entry)
            return (result, finish(&entry))
        }
        handover.deliver()
        return (value, result)
    }

    /// The user signs out: `remove` removes the record in the identifier's write turn, so every write that took
    /// the turn before lands before it, and only once the store removed it does the fence change
    /// (``signedOut(identifier:)``): every write waiting or taken before is refused. A sign-out the store refused
    /// changes nothing, so it loses nothing: the user is still signed in, with the newest credentials.
    func signOut(_ identifier: String, remove: () async throws -> Void) async throws {
        let (_, views) = try await withFencingWrite(identifier, remove) { $0.signOut() }
        // Every controller still holding the user closes, as over a coordinated store when her record is removed.
        for view in views { view.ledgerAdvanced(identifier) }
    }

    /// The user signed in again with `session` (now in the store): a refusal is forgotten, a pending rotation is no
    /// longer written (it would overwrite the sign-in), and the results of refreshes in flight from before are
    /// fenced. Refreshes in flight and what the ledger knows about spent tokens stay: a controller still holding the
    /// old credentials joins their refresh or gets their rotation instead of presenting a token twice. The sign-in's
    /// record is the identifier's newest: a write from before that lands after it has it written again. Called in
    /// the write turn (``signIn(_:session:write:)``).
    @discardableResult
    func signedIn(_ identifier: String, session: StoredSession? = nil) -> UInt64 {
        modify(ExactIdentifier(identifier)) { $0.signIn(session) }
    }

    /// The session that signed `identifier` in holds the new `fence` and `credentials` now, its write turn left and
    /// no refresh of its own in flight under an older fence: when it alone holds the identifier and the ledger keeps
    /// nothing beyond that sign-in, the entry forgets it (``Entry/settleSignIn(fence:holding:)``).
    func signInSettled(_ identifier: String, fence: UInt64, holding credentials: Credentials?) {
        modify(ExactIdentifier(identifier)) { $0.settleSignIn(fence: fence, holding: credentials) }
    }

    /// `identifier` signed out, seen in the store (another instance removed the record): every write taken before
    /// this point is fenced, a pending rotation is dropped, and the refresh in flight writes nothing. Every view
    /// holding it is told, as after ``signOut(_:remove:)``: each of this process's sessions of the user closes, not
    /// only the one that found the record gone.
    func signedOut(identifier: String) {
        let views = modify(ExactIdentifier(identifier)) { $0.signOut() }
        for view in views { view.ledgerAdvanced(identifier) }
    }

    /// A rotation nobody else is going to write (its flight's session ended): the ledger writes it now, in the
    /// caller's task (the flight's), and on `schedule` when that write fails.
    func ensureWritten(_ identifier: String, schedule: Schedule) async {
        let write = modify(ExactIdentifier(identifier)) { entry -> Bool in
            guard entry.unwritten else { return false }
            entry.keepSchedule(schedule)
            return true
        }
        if write { await rewriteNow(identifier) }
    }

    // MARK: - The write loop

    /// Starts the write loop when something is unwritten and it does not run: the ledger is the one writer that
    /// retries, whether or not a controller holds the identifier.
    private func startLoopIfNeeded(_ entry: inout Entry) -> Bool {
        guard entry.unwritten, !entry.retrying, entry.schedule != nil else { return false }
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
            let (schedule, fence) = entries.withLock { ($0[key]?.schedule, $0[key]?.fence) }
            guard let schedule, let fence else {
                modify(key) { $0.retrying = false }
                return
            }
            let delay = schedule.policy.backoff(attempt: attempt, jitter: Double.random(in: 0...1))
            try? await schedule.clock.sleep(until: schedule.clock.nowSeconds() + delay)
            // Signed out or in since: nothing of before is written; credentials left unwritten under the new fence
            // are (the next round reads the new fence).
            if let failure = await writeUnwritten(identifier, fence: fence) { schedule.reportFailure(failure) }
            let goesOn = modify(key) { entry -> Bool in
                entry.retrying = entry.unwritten
                return entry.retrying
            }
            if !goesOn { return }
            attempt += 1
        }
    }

    /// Writes the unwritten credentials now rather than on the failed-write schedule (a late write just overwrote
    /// them, a sign-in wrote the refresh token a refresh already spent, a refusal was just recorded, or nobody else
    /// is going to write them); a failure leaves them to the write loop. Under `fence` (by default the entry's now),
    /// in the turn `holding` when the caller already holds it (granted under `fence`), else in the next turn.
    private func rewriteNow(_ identifier: String, fence: UInt64? = nil, holding turn: UInt64? = nil) async {
        let key = ExactIdentifier(identifier)
        guard let fence = fence ?? entries.withLock({ $0[key]?.fence }) else { return }
        let failure =
            if let turn {
                await writeUnwritten(identifier, fence: fence, holding: turn)
            } else {
                await writeUnwritten(identifier, fence: fence)
            }
        guard failure != nil else { return }
        if modify(key, { self.startLoopIfNeeded(&$0) }) { startWriteLoop(identifier) }
    }

    /// Writes `identifier`'s unwritten credentials once, in its write turn under `fence`, reading them in the turn
    /// so that what is written is the newest. Returns the store's error when it refused them; `nil` when they were
    /// written, nothing was left to write (written meanwhile, or a newer record elsewhere stands), or the fence
    /// changed before the turn came.
    private func writeUnwritten(_ identifier: String, fence: UInt64) async -> (any Error)? {
        guard let turn = await enterWriteTurn(identifier, fence: fence)?.token else { return nil }
        return await writeUnwritten(identifier, fence: fence, holding: turn)
    }

    /// ``writeUnwritten(_:fence:)`` for a caller already holding the write turn `turn`, granted under `fence`;
    /// leaves it.
    private func writeUnwritten(_ identifier: String, fence: UInt64, holding turn: UInt64) async -> (any Error)? {
        let key = ExactIdentifier(identifier)
        let (job, handover) = modify(key) { entry -> (StoredSession?, Handover) in
            guard entry.unwritten, let current = entry.current else { return (nil, handOver(&entry, from: turn)) }
            return (current, Handover())
        }
        handover.deliver()
        guard let session = job else { return nil }
        var failure: (any Error)?
        do {
            if session.refreshTokenRefused {
                try await saveRefusal(session, identifier: identifier)
            } else if let coordinatedStore {
                // Conditional on the record these credentials replace: one that holds credentials a refresh known
                // here replaced (by refresh token when the server rotated it, by the very credentials when it did
                // not). One removed, or holding anything else (written elsewhere), stands.
                let record = try await coordinatedStore.loadRevised(identifier: identifier)
                guard let record, let stored = record.session.credentials, knowsReplaced(stored, of: key) else {
                    throw UserSessionError(.revisionConflict, "the record changed elsewhere")
                }
                _ = try await coordinatedStore.save(session, identifier: identifier, expectedRevision: record.revision)
            } else {
                try await store.save(session, identifier: identifier)
            }
        } catch let error as UserSessionError where error.code == .revisionConflict {
            // Another instance wrote a newer record (or removed it): that one stands.
            modify(key) { entry in
                entry.unwritten = false
                return handOver(&entry, from: turn)
            }.deliver()
            return nil
        } catch {
            failure = error
        }
        let (removal, handedOver) = modify(key) { entry -> (UInt64?, Handover) in
            let handover = handOver(&entry, from: turn)
            guard entry.fence == fence else {
                // Landed after a sign-out that did not wait for it (one seen in the store): undone.
                guard failure == nil, entry.signedOut else { return (nil, handover) }
                entry.reservedWrites += 1
                return (entry.fence, handover)
            }
            if failure == nil { landed(&entry, session) }
            return (nil, handover)
        }
        handedOver.deliver()
        if let removal { await removeAgain(identifier, fence: removal) }
        return failure
    }
}

extension StoredSession {
    /// The same record, marked as holding a refresh token the server refused.
    func markedRefused() -> StoredSession {
        var copy = self
        copy.refreshTokenRefused = true
        return copy
    }

    /// Whether this record holds `credentials`' access and refresh tokens (the same version of them).
    func holdsSameTokens(as credentials: Credentials) -> Bool {
        self.credentials?.isSameVersion(as: credentials) ?? false
    }
}

extension Credentials {
    /// Whether `other` holds the same access and refresh tokens (the same version of the credentials).
    func isSameVersion(as other: Credentials) -> Bool {
        accessToken == other.accessToken && refreshToken == other.refreshToken
    }
}

/// What holds an identifier in the ``CredentialsLedger`` besides its hold: a controller's view of the identifier's
/// credentials (the controller, which passes it to its gate), told when the entry's newest credentials advance, are
/// refused, or the user signs out.
protocol CredentialsLedgerView: AnyObject, Sendable {
    /// A refresh led by another holder of `identifier`, or credentials handed over to one, made the newest credentials:
    /// the view takes them when it still holds credentials they
    /// replaced (``CredentialsLedger/news(of:identifier:fence:)``). The same call says that the newest were refused
    /// (the view's session ends) or that the user signed out (it closes). Called after the ledger's lock is released.
    func ledgerAdvanced(_ identifier: String)
}
