/// FNV-1a with 64-bit state: stable across processes, platforms and releases (unlike `Hasher`).
///
/// Not cryptographic. It derives the PostgreSQL store's advisory-lock key from a namespace and an identifier (every
/// process of a fleet must derive the same key), and the short token hashes the fleet tools print (equal tokens hash
/// equal; the hash does not give the token back).
package struct StableHash64: Sendable, Hashable {
    package private(set) var value: UInt64 = 0xcbf2_9ce4_8422_2325

    package init() {}

    /// Hashes the UTF-8 bytes of `string`.
    package init(_ string: String) {
        combine(string)
    }

    package mutating func combine(_ byte: UInt8) {
        value ^= UInt64(byte)
        value = value &* 0x100_0000_01b3
    }

    package mutating func combine(_ string: String) {
        for byte in string.utf8 { combine(byte) }
    }

    /// The hash in lowercase hex, without leading zeros.
    package var hexDigits: String { String(value, radix: 16) }
}
