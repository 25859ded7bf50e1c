#if Sealing
import Crypto
import Foundation
import UserSessions

/// One AES-256 key of a ``SealingKeyRing``, with the identifier that sealed records name it by.
///
/// The key material comes from the caller (bytes, or a base64 string such as an environment variable holds) and
/// stays in memory: the package never writes it anywhere. ``description``, `dump` and errors show the identifier
/// only, never the material.
public struct SealingKey: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The key's identifier: 1 to 64 characters from `A-Z`, `a-z`, `0-9`, `_` and `-`. It is written in the clear
    /// in every record sealed with the key, so it must not be secret (a date such as `2026-11` works well).
    public let id: String
    let key: SymmetricKey

    /// Creates a key from its 32 bytes of material.
    ///
    /// - Throws: `UserSessionError.Code.invalidConfiguration` when `id` is not a valid identifier or
    ///   `bytes` is not 32 bytes long.
    public init(id: String, bytes: [UInt8]) throws {
        try self.init(id: id, key: SymmetricKey(data: bytes))
    }

    /// Creates a key from its material encoded in base64 (for example `openssl rand -base64 32`, read from the
    /// environment or a secrets manager). Surrounding whitespace is ignored.
    ///
    /// - Throws: `UserSessionError.Code.invalidConfiguration` when `id` is not a valid identifier, or
    ///   `base64` is not base64 of 32 bytes. The message never repeats the string.
    public init(id: String, base64: String) throws {
        let trimmed = base64.trimmingCharacters(in: .whitespacesAndNewlines)
        guard let data = Data(base64Encoded: trimmed) else {
            throw UserSessionError(.invalidConfiguration, "the material of sealing key \"\(id)\" is not base64")
        }
        try self.init(id: id, key: SymmetricKey(data: data))
    }

    /// Creates a key from a swift-crypto `SymmetricKey` of 256 bits.
    ///
    /// - Throws: `UserSessionError.Code.invalidConfiguration` when `id` is not a valid identifier or
    ///   the key is not 256 bits long.
    public init(id: String, key: SymmetricKey) throws {
        guard Self.isValid(id: id) else {
            throw UserSessionError(
                .invalidConfiguration, "a sealing key identifier must be 1 to 64 characters of A-Z a-z 0-9 _ -")
        }
        guard key.bitCount == 256 else {
            throw UserSessionError(
                .invalidConfiguration,
                "sealing key \"\(id)\" has \(key.bitCount / 8) bytes; AES-256-GCM needs 32")
        }
        self.id = id
        self.key = key
    }

    /// Whether `id` can name a key: 1 to 64 ASCII letters, digits, `_` or `-` (it never contains the `:` that
    /// separates the parts of a sealed record).
    static func isValid(id: String) -> Bool {
        let utf8 = id.utf8
        return (1...64).contains(utf8.count)
            && utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
                    return true
                default:
                    return false
                }
            }
    }

    public var description: String { "SealingKey(id: \(id))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["id": id], displayStyle: .struct) }
}
#endif
