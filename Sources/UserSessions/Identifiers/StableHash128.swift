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
