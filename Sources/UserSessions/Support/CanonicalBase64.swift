import Foundation

/// Base64 read in its one canonical spelling (RFC 4648 §3.5): the unused low bits of the last character before the
/// padding must be zero, so no two texts decode to the same bytes and a changed character always changes them.
///
/// Sealed records (standard alphabet, padded) and JOSE parts and sealed pending sign-ins (base64url, unpadded) are
/// read through here.
package enum CanonicalBase64 {
    /// The bytes of `text` in the standard alphabet with padding, or `nil` when it is not base64 or not canonical.
    package static func decode(_ text: some Collection<UInt8>) -> Data? {
        guard let data = Data(base64Encoded: Data(text)), hasNoUnusedBitsSet(text) else { return nil }
        return data
    }

    /// The bytes of `text` in base64url without padding (RFC 4648 §5, as JWS uses it), or `nil` when it is not that
    /// or not canonical (a `=` is refused).
    package static func decodeURL(_ text: some Collection<UInt8>) -> Data? {
        var standard: [UInt8] = []
        standard.reserveCapacity(text.count + 3)
        for byte in text {
            switch byte {
            case UInt8(ascii: "-"): standard.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): standard.append(UInt8(ascii: "/"))
            case UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "="): return nil
            default: standard.append(byte)
            }
        }
        standard.append(contentsOf: repeatElement(UInt8(ascii: "="), count: (4 - standard.count % 4) % 4))
        return decode(standard)
    }

    /// Whether the unused bits of the last character before the padding of `text` (padded base64 in the standard
    /// alphabet) are zero: one padding character leaves 2 bits unused, two leave 4.
    private static func hasNoUnusedBitsSet(_ text: some Collection<UInt8>) -> Bool {
        let bytes = Array(text.suffix(3))
        let padding = bytes.reversed().prefix { $0 == UInt8(ascii: "=") }.count
        guard padding > 0, padding < bytes.count else { return true }
        let last = bytes[bytes.count - 1 - padding]
        let value: UInt8
        switch last {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = last - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): value = last - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): value = last - UInt8(ascii: "0") + 52
        case UInt8(ascii: "+"): value = 62
        default: value = 63
        }
        return value & (padding == 1 ? 0b11 : 0b1111) == 0
    }
}
