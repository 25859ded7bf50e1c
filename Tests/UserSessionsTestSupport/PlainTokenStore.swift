import UserSessions

/// Another store's records seen through a plain ``TokenStore``: whatever the base offers besides (a lease,
/// revisions, change notifications) is hidden, and, being a value, it has no instance identity, so every standalone
/// controller given it keeps its credentials apart, as another process over the same records would.
package struct PlainTokenStore: TokenStore {
    package let base: any TokenStore

    package init(_ base: any TokenStore) {
        self.base = base
    }

    package func load(identifier: String) async throws -> StoredSession? {
        try await base.load(identifier: identifier)
    }

    package func save(_ session: StoredSession, identifier: String) async throws {
        try await base.save(session, identifier: identifier)
    }

    package func remove(identifier: String) async throws { try await base.remove(identifier: identifier) }
    package func loadCurrentIdentifier() async throws -> String? { try await base.loadCurrentIdentifier() }
    package func saveCurrentIdentifier(_ identifier: String?) async throws {
        try await base.saveCurrentIdentifier(identifier)
    }
    package func storedIdentifiers() async throws -> [String] { try await base.storedIdentifiers() }
}
