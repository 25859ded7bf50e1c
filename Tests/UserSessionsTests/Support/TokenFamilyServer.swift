import Foundation

@testable import UserSessions

/// A token server that rotates refresh tokens and revokes the whole family when a spent refresh token is presented
/// again (RFC 9700 §4.14.2, as Keycloak, Auth0 and Okta do).
///
/// Every sign-in starts a family: a user's first is named after the user, later ones `"<user>~<k>"`. Its tokens
/// are `"<family>/rt-<n>"` and `"<family>/at-<n>"`; families are independent, as at a real server. Refreshes can
/// be held (``holdRefreshes()``) so a test decides when they answer; ``started`` counts calls. ``reuses`` is what
/// every ledger test asserts to be zero.
///
/// Made with `rotates: false` it is a server that does not rotate refresh tokens (RFC 6749 allows it): a refresh
/// answers a new access token and the same refresh token, which stays valid; ``presentedAccessTokens`` then tells
/// whether two refreshes started from the same credentials.
final class TokenFamilyServer: TokenRefresher {
    private struct State {
        var families: [String: Int] = [:]
        var valid: [String: String] = [:]
        var next: [String: Int] = [:]
        var spent: Set<String> = []
        var revoked: Set<String> = []
        var presented: [String] = []
        var presentedAccessTokens: [String] = []
        var reuses = 0
        var holding = false
        var down = false
        var gates: [AsyncGate] = []
    }
    private let state = Locked(State())
    private let now: @Sendable () -> Date
    private let rotates: Bool
    let started = ArrivalCounter()

    init(rotates: Bool = true, now: @escaping @Sendable () -> Date) {
        self.rotates = rotates
        self.now = now
    }

    /// The credentials a sign-in of `user` gets: a new family whose valid refresh token is `"<family>/rt-0"`.
    func signIn(_ user: String, expiresIn: TimeInterval = 3600) -> UserSessionPrototype {
        let family = state.withLock { state -> String in
            let count = state.families[user, default: 0]
            state.families[user] = count + 1
            let family = count == 0 ? user : "\(user)~\(count)"
            state.valid[family] = "\(family)/rt-0"
            state.next[family] = 1
            return family
        }
        return UserSessionPrototype(
            userInfo: UserInfo(id: user),
            credentials: Credentials(
                accessToken: "\(family)/at-0", refreshToken: "\(family)/rt-0",
                expiresAt: now().addingTimeInterval(expiresIn), source: .signIn))
    }

    /// Refreshes from now on wait until ``releaseRefreshes()``.
    func holdRefreshes() { state.withLock { $0.holding = true } }

    /// Lets every held refresh (and later ones) answer.
    func releaseRefreshes() {
        let gates = state.withLock { state -> [AsyncGate] in
            state.holding = false
            defer { state.gates.removeAll() }
            return state.gates
        }
        for gate in gates { gate.open() }
    }

    /// While `down`, every refresh fails as a token endpoint that answers 503 would (transient), rotating nothing.
    func setDown(_ down: Bool) { state.withLock { $0.down = down } }

    /// Revokes `family` now (as an operator, or a reuse detection elsewhere, would).
    func revoke(_ family: String) { _ = state.withLock { $0.revoked.insert(family) } }

    var reuses: Int { state.withLock { $0.reuses } }

    /// The refresh token `family` accepts now, or `nil` once it was revoked.
    func validRefreshToken(of family: String) -> String? {
        state.withLock { $0.revoked.contains(family) ? nil : $0.valid[family] }
    }
    var presented: [String] { state.withLock { $0.presented } }
    /// The access tokens of the credentials every refresh presented, in order.
    var presentedAccessTokens: [String] { state.withLock { $0.presentedAccessTokens } }
    var calls: Int { state.withLock { $0.presented.count } }

    func refresh(_ credentials: Credentials) async throws -> Credentials {
        let token = credentials.refreshToken ?? ""
        let gate = state.withLock { state -> AsyncGate? in
            state.presented.append(token)
            state.presentedAccessTokens.append(credentials.accessToken)
            guard state.holding else { return nil }
            let gate = AsyncGate()
            state.gates.append(gate)
            return gate
        }
        started.arrive()
        if let gate { await gate.wait() }
        if state.withLock({ $0.down }) {
            throw UserSessionError(.refreshFailed, "the token endpoint answered 503", failureClass: .transient)
        }
        let family = String(token.prefix { $0 != "/" })
        let issued = state.withLock { state -> Int? in
            if state.revoked.contains(family) { return nil }
            guard state.valid[family] == token else {
                if state.spent.contains(token) {
                    state.reuses += 1
                    state.revoked.insert(family)
                }
                return nil
            }
            let number = state.next[family, default: 1]
            state.next[family] = number + 1
            if rotates {
                state.spent.insert(token)
                state.valid[family] = "\(family)/rt-\(number)"
            }
            return number
        }
        guard let issued else {
            throw UserSessionError(.refreshFailed, "invalid_grant", failureClass: .terminal)
        }
        return Credentials(
            accessToken: "\(family)/at-\(issued)", refreshToken: rotates ? "\(family)/rt-\(issued)" : token,
            expiresAt: now().addingTimeInterval(3600), lastRefreshedAt: now(), source: .refresh)
    }
}

/// An in-memory store whose writes fail while ``failWrites`` is set: a store that is down.
final class OutageStore: ForwardingTokenStore {
    let base = InMemoryTokenStore()
    var forwardedTo: any TokenStore { base }
    private let failing = Locked(false)
    let saves = ArrivalCounter()

    init() {}

    func failWrites(_ fail: Bool) { failing.withLock { $0 = fail } }

    private let failingRemovals = Locked(false)

    /// While `fail`, removals fail too (a sign-out then throws `storeFailure` and the record stays).
    func failRemovals(_ fail: Bool) { failingRemovals.withLock { $0 = fail } }

    func remove(identifier: String) async throws {
        if failingRemovals.withLock({ $0 }) { throw UserSessionError(.storeFailure, "the store is down") }
        try await base.remove(identifier: identifier)
    }

    func save(_ session: StoredSession, identifier: String) async throws {
        defer { saves.arrive() }
        if failing.withLock({ $0 }) { throw UserSessionError(.storeFailure, "the store is down") }
        try await base.save(session, identifier: identifier)
    }

    /// The refresh token stored for `identifier`.
    func storedToken(_ identifier: String) async -> String? {
        try? await base.load(identifier: identifier)?.credentials?.refreshToken
    }
}

/// An observer that counts the refreshes whose end was reported (committed, failed or discarded): a test waits for
/// it to know a flight's commit is over.
final class FlightEndProbe: UserSessionObserver {
    let ended = ArrivalCounter()

    init() {}

    func observe(_ event: UserSessionEvent, context: UserSessionEventContext) {}
    func observeRefresh(_ report: UserSessionRefreshReport) { ended.arrive() }
}
