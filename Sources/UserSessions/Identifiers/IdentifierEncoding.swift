/// Turns session identifiers into names that are safe as file names and as remote `unique_id` values.
///
/// An encoded name uses only `[a-z0-9_-]`, so it can never be `.`, `..`, contain `/` or NUL, or start with a dot:
/// - bytes `a`–`z`, `0`–`9` and `-` of the identifier's UTF-8 form are kept;
/// - every other byte becomes `_` followed by two lowercase hex digits (`A` → `_41`, `.` → `_2e`, `_` → `_5f`).
///
/// The mapping is injective, so two identifiers never share a name. When the encoded form would be longer than
/// ``maximumEncodedLength`` bytes, the name is instead a stable 128-bit hash of the identifier; the two kinds are
/// told apart by their prefix (`u-` for encoded, `h-` for hashed). Whoever stores data under a hashed name must also
/// store the full identifier, to detect the (astronomically unlikely, but not impossible) collision.
enum IdentifierEncoding {
    /// Identifiers longer than this many UTF-8 bytes are rejected: ``IdentifierRules/maximumStoredLength``.
    static let maximumIdentifierLength = IdentifierRules.maximumStoredLength
    /// Encoded forms longer than this are replaced by a hash, keeping names well under the usual 255-byte limit.
    static let maximumEncodedLength = 200

    /// The safe name of an identifier.
    struct Name: Hashable, Sendable {
        /// `u-…` or `h-…`, using only `[a-z0-9_-]`.
        var value: String
        /// Whether the name is a hash, so the identifier cannot be recovered from it.
        var isHashed: Bool
    }

    /// Checks that `identifier` is usable as a key (``IdentifierRules/validateForStore(_:)``).
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier`` when it is empty, contains NUL, or is longer than
    ///   ``maximumIdentifierLength`` UTF-8 bytes.
    static func validate(_ identifier: String) throws {
        try IdentifierRules.validateForStore(identifier)
    }

    /// Validates `identifier` and returns its safe name.
    static func name(for identifier: String) throws -> Name {
        try validate(identifier)
        var encoded: [UInt8] = Array("u-".utf8)
        encoded.reserveCapacity(min(identifier.utf8.count * 3, maximumEncodedLength) + 2)
        guard escaping.append(identifier.utf8, to: &encoded, limit: maximumEncodedLength + 2) else {
            return Name(value: "h-" + StableHash128(identifier).hexDigits, isHashed: true)
        }
        return Name(value: String(decoding: encoded, as: UTF8.self), isHashed: false)
    }

    /// Recovers the identifier from a `u-` name; `nil` for hashed or malformed names.
    static func identifier(fromName name: String) -> String? {
        var bytes = Array(name.utf8)
        guard bytes.count > 2, bytes[0] == UInt8(ascii: "u"), bytes[1] == UInt8(ascii: "-") else { return nil }
        bytes.removeFirst(2)
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if isKept(byte) {
                decoded.append(byte)
                index += 1
            } else if byte == escaping.escape, index + 2 < bytes.count,
                let high = escaping.value(ofDigit: bytes[index + 1]),
                let low = escaping.value(ofDigit: bytes[index + 2])
            {
                let value = high << 4 | low
                // An escaped byte that would have been kept means the name was not made by `name(for:)`.
                guard !isKept(value) else { return nil }
                decoded.append(value)
                index += 3
            } else {
                return nil
            }
        }
        guard let identifier = String(validating: decoded, as: UTF8.self), (try? validate(identifier)) != nil else {
            return nil
        }
        return identifier
    }

    private static func isKept(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
            || byte == UInt8(ascii: "-")
    }

    private static let escaping = HexEscaping(escape: UInt8(ascii: "_"), uppercase: false) { isKept($0) }
}
