import Foundation
import UserSessions

/// The token store a node uses, chosen with `--store KIND:ARGUMENT`.
///
/// Only `file:DIRECTORY` (a ``FileTokenStore``) exists with default traits. Other kinds (such as
/// `postgres:URL` behind the PostgreSQL trait) are added here, next to it.
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
        default:
            throw Unknown(description: "unknown store kind \"\(kind)\"; this build knows: file")
        }
    }
}
