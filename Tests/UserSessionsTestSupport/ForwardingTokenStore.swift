import UserSessions

/// A test store that wraps another: the ``TokenStore`` calls it does not implement itself go to ``forwardedTo``
/// unchanged, so a wrapper spells out only the calls it changes (a held load, a failing save, a count).
package protocol ForwardingTokenStore: TokenStore {
    /// The store the calls go to.
    var forwardedTo: any TokenStore { get }
}

extension ForwardingTokenStore {
    package func load(identifier: String) async throws -> StoredSession? {
        try await forwardedTo.load(identifier: identifier)
    }

    package func save(_ session: StoredSession, identifier: String) async throws {
        try await forwardedTo.save(session, identifier: identifier)
    }

    package func remove(identifier: String) async throws { try await forwardedTo.remove(identifier: identifier) }
    package func loadCurrentIdentifier() async throws -> String? { try await forwardedTo.loadCurrentIdentifier() }
    package func saveCurrentIdentifier(_ identifier: String?) async throws {
        try await forwardedTo.saveCurrentIdentifier(identifier)
    }
    package func storedIdentifiers() async throws -> [String] { try await forwardedTo.storedIdentifiers() }
}
