/// A ``TokenStore`` that keeps everything in memory, for tests and ephemeral servers.
///
/// Identifiers are compared by their UTF-8 bytes, as in every store: `"caf\u{E9}"` and `"cafe\u{301}"` are two
/// identifiers although Swift calls them equal strings.
public final class InMemoryTokenStore: TokenStore {
    private struct Contents {
        var sessions: [ExactIdentifier: StoredSession] = [:]
        var currentIdentifier: String?
    }
    private let contents = Locked(Contents())

    /// Creates an empty store.
    public init() {}

    public func load(identifier: String) async throws -> StoredSession? {
        contents.withLock { $0.sessions[ExactIdentifier(identifier)] }
    }

    public func save(_ session: StoredSession, identifier: String) async throws {
        contents.withLock { $0.sessions[ExactIdentifier(identifier)] = session }
    }

    public func remove(identifier: String) async throws {
        contents.withLock { _ = $0.sessions.removeValue(forKey: ExactIdentifier(identifier)) }
    }

    public func loadCurrentIdentifier() async throws -> String? {
        contents.withLock { $0.currentIdentifier }
    }

    public func saveCurrentIdentifier(_ identifier: String?) async throws {
        contents.withLock { $0.currentIdentifier = identifier }
    }

    public func storedIdentifiers() async throws -> [String] {
        contents.withLock { $0.sessions.keys.map(\.value).sorted() }
    }
}
