import Foundation

@testable import UserSessions

/// A token server that rotates refresh tokens per user and revokes the whole family when a spent refresh token is
/// presented again (RFC 9700 §4.14.2, as Keycloak, Auth0 and Okta do). Tokens are `"<user>/rt-<n>"`.
///
/// Refreshes can be held (``holdRefreshes()``) so a test decides when they answer; ``started`` and ``answered``
/// count calls. ``reuses`` is what every ledger test asserts to be zero.
final class TokenFamilyServer: TokenRefresher {
    private struct State {
        var valid: [String: String] = [:]
        var next: [String: Int] = [:]
        var spent: Set<String> = []
        var revoked: Set<String> = []
        var presented: [String] = []
        var reuses = 0
        var holding = false
        var gates: [AsyncGate] = []
    }
    private let state = Locked(State())
    private let now: @Sendable () -> Date
    let started = ArrivalCounter()
    let answered = ArrivalCounter()

    init(now: @escaping @Sendable () -> Date) { self.now = now }

    /// The credentials a sign-in of `user` gets: a new family whose valid refresh token is `"<user>/rt-0"`.
    func signIn(_ user: String, expiresIn: TimeInterval = 3600) -> UserSessionPrototype {
        state.withLock { state in
            state.valid[user] = "\(user)/rt-0"
            state.next[user] = 1
            state.revoked.remove(user)
        }
        return UserSessionPrototype(
            userInfo: UserInfo(id: user),
            credentials: Credentials(
                accessToken: "\(user)/at-0", refreshToken: "\(user)/rt-0",
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

    /// Revokes `user`'s family now (as an operator or a reuse detection elsewhere would).
    func revoke(_ user: String) { _ = state.withLock { $0.revoked.insert(user) } }

    var reuses: Int { state.withLock { $0.reuses } }
    var presented: [String] { state.withLock { $0.presented } }
    var calls: Int { state.withLock { $0.presented.count } }
    func valid(_ user: String) -> String? { state.withLock { $0.valid[user] } }

    func refresh(_ credentials: Credentials) async throws -> Credentials {
        let token = credentials.refreshToken ?? ""
        let gate = state.withLock { state -> AsyncGate? in
            state.presented.append(token)
            guard state.holding else { return nil }
            let gate = AsyncGate()
            state.gates.append(gate)
            return gate
        }
        started.arrive()
        if let gate { await gate.wait() }
        defer { answered.arrive() }
        let user = String(token.prefix { $0 != "/" })
        let issued = state.withLock { state -> Int? in
            if state.revoked.contains(user) { return nil }
            guard state.valid[user] == token else {
                if state.spent.contains(token) {
                    state.reuses += 1
                    state.revoked.insert(user)
                }
                return nil
            }
            state.spent.insert(token)
            let number = state.next[user, default: 1]
            state.next[user] = number + 1
            state.valid[user] = "\(user)/rt-\(number)"
            return number
        }
        guard let issued else {
            throw UserSessionError(.refreshFailed, "invalid_grant", failureClass: .terminal)
        }
        return Credentials(
            accessToken: "\(user)/at-\(issued)", refreshToken: "\(user)/rt-\(issued)",
            expiresAt: now().addingTimeInterval(3600), lastRefreshedAt: now(), source: .refresh)
    }
}

/// An in-memory store whose writes fail while ``failWrites`` is set: a store that is down.
final class OutageStore: TokenStore {
    let base = InMemoryTokenStore()
    private let failing = Locked(false)
    let saves = ArrivalCounter()

    init() {}

    func failWrites(_ fail: Bool) { failing.withLock { $0 = fail } }

    func load(identifier: String) async throws -> StoredSession? { try await base.load(identifier: identifier) }
    func save(_ session: StoredSession, identifier: String) async throws {
        defer { saves.arrive() }
        if failing.withLock({ $0 }) { throw UserSessionError(.storeFailure, "the store is down") }
        try await base.save(session, identifier: identifier)
    }
    func remove(identifier: String) async throws { try await base.remove(identifier: identifier) }
    func loadCurrentIdentifier() async throws -> String? { try await base.loadCurrentIdentifier() }
    func saveCurrentIdentifier(_ identifier: String?) async throws { try await base.saveCurrentIdentifier(identifier) }
    func storedIdentifiers() async throws -> [String] { try await base.storedIdentifiers() }

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
