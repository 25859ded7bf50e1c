import Foundation
import UserSessions

/// Looks for secrets in raw stored bytes (a file, a row, a data file of the token cache): a secret leaks when the
/// bytes contain it whole or any 8-byte piece of its UTF-8 form (so a token split, truncated or partly encoded is
/// found too).
package enum SecretScan {
    /// The length of the pieces looked for.
    package static let pieceLength = 8

    /// The secrets of `secrets` of which `bytes` contain the whole or an 8-byte piece; empty when nothing leaks.
    package static func leaked(_ secrets: [String], in bytes: [UInt8]) -> [String] {
        secrets.filter { secret in
            let utf8 = Array(secret.utf8)
            guard utf8.count > pieceLength else { return contains(bytes, utf8) }
            return (0...(utf8.count - pieceLength)).contains { start in
                contains(bytes, Array(utf8[start..<(start + pieceLength)]))
            }
        }
    }

    private static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return needle.isEmpty }
        return (0...(haystack.count - needle.count)).contains { start in
            haystack[start..<(start + needle.count)].elementsEqual(needle)
        }
    }

    /// Every token `credentials` carry, found in their JSON form (each member named `…_token` but `token_type`), so a
    /// token field the credentials gain later is looked for too.
    package static func tokens(of credentials: Credentials?) -> [String] {
        guard let credentials, let data = try? JSONEncoder().encode(credentials),
            let members = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        else { return [] }
        let tokens = members.filter { $0.key.hasSuffix("_token") && $0.key != "token_type" }
        return tokens.compactMap { $0.value as? String }.sorted()
    }
}
