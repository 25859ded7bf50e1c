import Synchronization

/// A ``TokenStore`` that keeps everything in memory, for tests and ephemeral servers.
public final class InMemoryTokenStore: TokenStore {
    private struct Contents {
        var sessions: [String: StoredSession] = [:]
        var currentIdentifier: String?
    }
    private let contents = Mutex(Contents())

    /// Creates an empty store.
    public init() {}

    public func load(identifier: String) async throws -> StoredSession? {
        contents.withLock { $0.sessions[identifier] }
    }

    public func save(_ session: StoredSession, identifier: String) async throws {
        contents.withLock { $0.sessions[identifier] = session }
    }

    public func remove(identifier: String) async throws {
        contents.withLock { _ = $0.sessions.removeValue(forKey: identifier) }
    }

    public func loadCurrentIdentifier() async throws -> String? {
        contents.withLock { $0.currentIdentifier }
    }

    public func saveCurrentIdentifier(_ identifier: String?) async throws {
        contents.withLock { $0.currentIdentifier = identifier }
    }

    public func storedIdentifiers() async throws -> [String] {
        contents.withLock { $0.sessions.keys.sorted() }
    }
}
