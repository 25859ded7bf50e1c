import Foundation

@testable import UserSessions

/// An in-memory store a test can stop in the middle of a call: the next load of an identifier is held after it read
/// the record (so it returns what was stored before the hold), the next save is held before it writes. Writes and
/// removals can also be made to fail, as a store that is down.
final class GatedStore: ForwardingTokenStore {
    let base = InMemoryTokenStore()
    var forwardedTo: any TokenStore { base }
    private struct State {
        /// The next load's hold, and whether it waits before reading the record (else after).
        var heldLoads: [String: (gate: AsyncGate, beforeReading: Bool)] = [:]
        var heldSaves: [String: AsyncGate] = [:]
        var failWrites = false
        var failRemoves = false
    }
    private let state = Locked(State())
    /// Loads and saves that reached their hold.
    let loadsHeld = ArrivalCounter()
    let savesHeld = ArrivalCounter()
    /// Every save and removal attempt, failed or not.
    let saves = ArrivalCounter()
    let removes = ArrivalCounter()

    init() {}

    /// Holds the next load of `identifier` until the returned gate opens: after it read the record (so it returns
    /// what was stored before the hold), or, `beforeReading`, before it reads (so it returns what is stored when the
    /// gate opens).
    func holdNextLoad(of identifier: String, beforeReading: Bool = false) -> AsyncGate {
        let gate = AsyncGate()
        state.withLock { $0.heldLoads[identifier] = (gate, beforeReading) }
        return gate
    }

    /// Holds the next save of `identifier` before it writes, until the returned gate opens.
    func holdNextSave(of identifier: String) -> AsyncGate {
        let gate = AsyncGate()
        state.withLock { $0.heldSaves[identifier] = gate }
        return gate
    }

    func failWrites(_ fail: Bool) { state.withLock { $0.failWrites = fail } }
    func failRemoves(_ fail: Bool) { state.withLock { $0.failRemoves = fail } }

    func load(identifier: String) async throws -> StoredSession? {
        let hold = state.withLock { $0.heldLoads.removeValue(forKey: identifier) }
        if let hold, hold.beforeReading {
            loadsHeld.arrive()
            await hold.gate.wait()
        }
        let stored = try await base.load(identifier: identifier)
        if let hold, !hold.beforeReading {
            loadsHeld.arrive()
            await hold.gate.wait()
        }
        return stored
    }

    func save(_ session: StoredSession, identifier: String) async throws {
        defer { saves.arrive() }
        if let gate = state.withLock({ $0.heldSaves.removeValue(forKey: identifier) }) {
            savesHeld.arrive()
            await gate.wait()
        }
        if state.withLock({ $0.failWrites }) { throw UserSessionError(.storeFailure, "the store is down") }
        try await base.save(session, identifier: identifier)
    }

    func remove(identifier: String) async throws {
        defer { removes.arrive() }
        if state.withLock({ $0.failRemoves }) { throw UserSessionError(.storeFailure, "the store is down") }
        try await base.remove(identifier: identifier)
    }

    /// What is stored for `identifier`, read past the holds.
    func stored(_ identifier: String) async -> StoredSession? { try? await base.load(identifier: identifier) }
}

/// A token server that never rotates refresh tokens (RFC 6749 §6 allows it): every refresh of a valid refresh token
/// returns a new access token `"<user>/at-<n>"` and the same refresh token.
final class NonRotatingServer: TokenRefresher {
    private let issued = Locked(0)
    private let now: @Sendable () -> Date

    init(now: @escaping @Sendable () -> Date) { self.now = now }

    var calls: Int { issued.withLock { $0 } }

    func signIn(_ user: String, expiresIn: TimeInterval) -> UserSessionPrototype {
        UserSessionPrototype(
            userInfo: UserInfo(id: user),
            credentials: Credentials(
                accessToken: "\(user)/at-0", refreshToken: "\(user)/rt", expiresAt: now().addingTimeInterval(expiresIn),
                source: .signIn))
    }

    func refresh(_ credentials: Credentials) async throws -> Credentials {
        let number = issued.withLock { count -> Int in
            count += 1
            return count
        }
        let user = String((credentials.refreshToken ?? "").prefix { $0 != "/" })
        return Credentials(
            accessToken: "\(user)/at-\(number)", refreshToken: credentials.refreshToken,
            expiresAt: now().addingTimeInterval(3600), lastRefreshedAt: now(), source: .refresh)
    }
}
