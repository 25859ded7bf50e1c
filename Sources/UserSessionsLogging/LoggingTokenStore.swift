#if Logging
import Logging
import UserSessions

/// A ``TokenStore`` that logs every call to the store it wraps: failures at `warning`, with the operation, the
/// identifier and the error (a ``UserSessionError``'s description, or only the type of any other error, which
/// might print a secret); successful calls at `trace`. Stored sessions are never logged.
///
/// Make one with ``UserSessions/TokenStore/logging(to:)``. A class, so that every controller given this instance
/// shares one owner of each user's credentials, as with any other store instance.
public final class LoggingTokenStore<Base: TokenStore>: TokenStore {
    /// The store that does the work.
    public let base: Base
    /// Where the lines go.
    public let logger: Logger

    /// Wraps `base`, logging to `logger`.
    public init(_ base: Base, logger: Logger) {
        self.base = base
        self.logger = logger
    }

    public func load(identifier: String) async throws -> StoredSession? {
        try await logged("load", identifier) { try await base.load(identifier: identifier) }
    }

    public func save(_ session: StoredSession, identifier: String) async throws {
        try await logged("save", identifier) { try await base.save(session, identifier: identifier) }
    }

    public func remove(identifier: String) async throws {
        try await logged("remove", identifier) { try await base.remove(identifier: identifier) }
    }

    public func loadCurrentIdentifier() async throws -> String? {
        try await logged("loadCurrentIdentifier", nil) { try await base.loadCurrentIdentifier() }
    }

    public func saveCurrentIdentifier(_ identifier: String?) async throws {
        try await logged("saveCurrentIdentifier", identifier) { try await base.saveCurrentIdentifier(identifier) }
    }

    public func storedIdentifiers() async throws -> [String] {
        try await logged("storedIdentifiers", nil) { try await base.storedIdentifiers() }
    }

    private func logged<Result>(
        _ operation: String, _ identifier: String?, _ body: () async throws -> Result
    ) async throws -> Result {
        var metadata: Logger.Metadata = [MetadataKey.storeOperation: "\(operation)"]
        metadata[MetadataKey.identifier] = identifier.map { "\($0)" }
        do {
            let result = try await body()
            logger.trace("token store call succeeded", metadata: metadata)
            return result
        } catch {
            metadata[MetadataKey.error] = "\(Self.describe(error))"
            logger.warning("token store call failed", metadata: metadata)
            throw error
        }
    }

    /// A description that cannot carry a secret: ours are written not to; others might print anything.
    static func describe(_ error: any Error) -> String {
        if let error = error as? UserSessionError { return error.description }
        return String(describing: type(of: error))
    }
}

extension TokenStore {
    /// This store, logging every call to `logger` (see ``LoggingTokenStore``).
    public func logging(to logger: Logger) -> LoggingTokenStore<Self> {
        LoggingTokenStore(self, logger: logger)
    }
}
#endif
