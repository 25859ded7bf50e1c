import Foundation
import UserSessions
import UserSessionsTestSupport

/// The token store a node uses, chosen with `--store KIND:ARGUMENT`.
///
/// With default traits: `file:DIRECTORY` (a ``FileTokenStore``) and `uncoordinated-file:DIRECTORY` (the same files
/// seen through a plain ``TokenStore``, without the lease: the control that shows what coordination prevents).
/// Other kinds (such as `postgres:URL` behind the PostgreSQL trait) are added here, next to them.
enum StoreSelection {
    struct Unknown: Error, CustomStringConvertible {
        var description: String
    }

    /// The store that `argument` names.
    static func store(for argument: String) throws -> any TokenStore {
        guard let colon = argument.firstIndex(of: ":") else {
            throw Unknown(description: "--store wants KIND:ARGUMENT, such as file:/tmp/tokens")
        }
        let kind = argument[..<colon]
        let rest = String(argument[argument.index(after: colon)...])
        switch kind {
        case "file":
            guard !rest.isEmpty else { throw Unknown(description: "--store file: wants a directory") }
            return FileTokenStore(directory: URL(fileURLWithPath: rest, isDirectory: true))
        case "uncoordinated-file":
            guard !rest.isEmpty else { throw Unknown(description: "--store uncoordinated-file: wants a directory") }
            return PlainTokenStore(FileTokenStore(directory: URL(fileURLWithPath: rest, isDirectory: true)))
        case "postgres":
            throw Unknown(
                description:
                    "--store postgres: needs the PostgreSQL trait (swift build --traits PostgreSQL); this build knows: file, uncoordinated-file"
            )
        default:
            throw Unknown(description: "unknown store kind \"\(kind)\"; this build knows: \(knownKinds)")
        }
    }

    /// Returns once `store` hears the changes other nodes make (a PostgreSQL store's `LISTEN` is in place); at once
    /// for the other stores, which hear them from the moment they are subscribed to.
    static func waitUntilListening(_ store: any TokenStore) async throws {
        #if PostgreSQL
        try await waitUntilPostgresListening(store)
        #endif
    }

    /// `store`, or `store` sealed with `key` (`ID:BASE64`) when one is given.
    static func sealing(_ store: any TokenStore, key: String?) throws -> any TokenStore {
        guard let key else { return store }
        #if Sealing
        return try sealed(store, key: key)
        #else
        throw Unknown(description: "--sealing-key needs the Sealing trait (swift build --traits Sealing)")
        #endif
    }

    #if PostgreSQL
    static let knownKinds = "file, uncoordinated-file, postgres"
    #else
    static let knownKinds = "file, uncoordinated-file"
    #endif

    /// Runs `body` with the store that `argument` names, and with whatever that store needs running around it (the
    /// PostgreSQL client, shut down when `body` returns).
    static func withStore<Value: Sendable>(
        for argument: String, _ body: (any TokenStore) async throws -> Value
    ) async throws -> Value {
        #if PostgreSQL
        if argument.hasPrefix("postgres:") {
            return try await withPostgresStore(String(argument.dropFirst("postgres:".count)), body)
        }
        #endif
        return try await body(try store(for: argument))
    }
}
