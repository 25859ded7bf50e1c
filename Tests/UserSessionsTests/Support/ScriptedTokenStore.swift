import Foundation

@testable import UserSessions

/// A ``TokenStore`` in memory that records every write and can be told to fail the next saves.
final class ScriptedTokenStore: TokenStore {
    private struct State {
        var sessions: [String: StoredSession] = [:]
        var currentIdentifier: String?
        var saves: [(identifier: String, session: StoredSession)] = []
        var removes: [String] = []
        var failuresLeft = 0
    }
    private let state = Locked(State())

    init() {}

    /// Makes the next `count` saves throw ``UserSessionError/Code/storeFailure``.
    func failNextSaves(_ count: Int) {
        state.withLock { $0.failuresLeft = count }
    }

    /// Every successful save, in order.
    var saves: [(identifier: String, session: StoredSession)] { state.withLock { $0.saves } }
    /// Every failed or successful save attempt count.
    var saveCount: Int { state.withLock { $0.saves.count } }
    /// What is stored for `identifier`.
    func stored(_ identifier: String) -> StoredSession? { state.withLock { $0.sessions[identifier] } }

    func load(identifier: String) async throws -> StoredSession? {
        state.withLock { $0.sessions[identifier] }
    }

    func save(_ session: StoredSession, identifier: String) async throws {
        try state.withLock { state in
            if state.failuresLeft > 0 {
                state.failuresLeft -= 1
                throw UserSessionError(.storeFailure, "scripted write failure")
            }
            state.sessions[identifier] = session
            state.saves.append((identifier, session))
        }
    }

    func remove(identifier: String) async throws {
        state.withLock { state in
            state.sessions.removeValue(forKey: identifier)
            state.removes.append(identifier)
        }
    }

    func loadCurrentIdentifier() async throws -> String? { state.withLock { $0.currentIdentifier } }

    func saveCurrentIdentifier(_ identifier: String?) async throws {
        state.withLock { $0.currentIdentifier = identifier }
    }

    func storedIdentifiers() async throws -> [String] { state.withLock { $0.sessions.keys.sorted() } }
}
