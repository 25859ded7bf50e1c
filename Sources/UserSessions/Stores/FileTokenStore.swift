import Foundation

/// The embedded default ``TokenStore``: one file per identifier in a private directory.
///
/// SKELETON: to be implemented (issue 2).
public final class FileTokenStore: TokenStore {
    /// The directory holding the files.
    public let directory: URL

    /// Creates a store in `directory` (created with mode `0700` on first use).
    public init(directory: URL) {
        self.directory = directory
    }

    public func load(identifier: String) async throws -> StoredSession? { nil }
    public func save(_ session: StoredSession, identifier: String) async throws {}
    public func remove(identifier: String) async throws {}
    public func loadCurrentIdentifier() async throws -> String? { nil }
    public func saveCurrentIdentifier(_ identifier: String?) async throws {}
    public func storedIdentifiers() async throws -> [String] { [] }
}
