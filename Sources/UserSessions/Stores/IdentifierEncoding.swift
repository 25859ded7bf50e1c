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
    /// Identifiers longer than this many UTF-8 bytes are rejected: 64 KiB.
    static let maximumIdentifierLength = 64 * 1024
    /// Encoded forms longer than this are replaced by a hash, keeping names well under the usual 255-byte limit.
    static let maximumEncodedLength = 200

    /// The safe name of an identifier.
    struct Name: Hashable, Sendable {
        /// `u-…` or `h-…`, using only `[a-z0-9_-]`.
        var value: String
        /// Whether the name is a hash, so the identifier cannot be recovered from it.
        var isHashed: Bool
    }

    /// Why `identifier` is not usable, or `nil`: it is empty, longer than `maximumLength` UTF-8 bytes, or contains
    /// NUL. The one check behind ``validate(_:)`` and the controller's stricter limit for sessions it opens.
    static func problem(with identifier: String, maximumLength: Int = maximumIdentifierLength) -> String? {
        let utf8 = identifier.utf8
        if utf8.isEmpty { return "is empty" }
        if utf8.count > maximumLength { return "is \(utf8.count) bytes long; the limit is \(maximumLength)" }
        if utf8.contains(0) { return "contains NUL" }
        return nil
    }

    /// Checks that `identifier` is usable as a key.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier`` when it is empty, contains NUL, or is longer than
    ///   ``maximumIdentifierLength`` UTF-8 bytes.
    static func validate(_ identifier: String) throws {
        if let problem = problem(with: identifier) {
            throw UserSessionError(.invalidIdentifier, "the session identifier \(problem)")
        }
    }

    /// Validates `identifier` and returns its safe name.
    static func name(for identifier: String) throws -> Name {
        try validate(identifier)
        var encoded: [UInt8] = Array("u-".utf8)
        encoded.reserveCapacity(min(identifier.utf8.count * 3, maximumEncodedLength) + 2)
        for byte in identifier.utf8 {
            if isKept(byte) {
                encoded.append(byte)
            } else {
                encoded.append(UInt8(ascii: "_"))
                encoded.append(hexDigit(byte >> 4))
                encoded.append(hexDigit(byte & 0x0F))
            }
            if encoded.count - 2 > maximumEncodedLength {
                return Name(value: "h-" + StableHash128(identifier).hexDigits, isHashed: true)
            }
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
            } else if byte == UInt8(ascii: "_"), index + 2 < bytes.count, let high = hexValue(bytes[index + 1]),
                let low = hexValue(bytes[index + 2])
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

    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }

    private static func hexValue(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}

/// FNV-1a with 128-bit state: stable across processes, platforms and releases (unlike `Hasher`), and small.
///
/// Not cryptographic. It only shortens long identifiers into file names; the full identifier is stored alongside,
/// so a collision is detected rather than trusted.
struct StableHash128: Sendable, Hashable {
    private(set) var high: UInt64 = 0x6c62_272e_07bb_0142
    private(set) var low: UInt64 = 0x62b8_2175_6295_c58d

    /// Hashes the UTF-8 bytes of `string`.
    init(_ string: String) {
        for byte in string.utf8 { combine(byte) }
    }

    private mutating func combine(_ byte: UInt8) {
        low ^= UInt64(byte)
        // Multiply the 128-bit state by the FNV prime 2^88 + 0x13b, modulo 2^128.
        let (productHigh, productLow) = low.multipliedFullWidth(by: 0x13b)
        let newHigh = high &* 0x13b &+ productHigh &+ (low << 24)
        high = newHigh
        low = productLow
    }

    /// The 32 lowercase hex digits of the hash, most significant first.
    var hexDigits: String {
        func padded(_ value: UInt64) -> String {
            let digits = String(value, radix: 16)
            return String(repeating: "0", count: 16 - digits.count) + digits
        }
        return padded(high) + padded(low)
    }
}
