import Foundation

/// Base64 read in its one canonical spelling (RFC 4648 §3.5): the unused low bits of the last character before the
/// padding must be zero, so no two texts decode to the same bytes and a changed character always changes them.
///
/// Sealed records (standard alphabet, padded) and JOSE parts and sealed pending sign-ins (base64url, unpadded) are
/// read through here.
package enum CanonicalBase64 {
    /// The bytes of `text` in the standard alphabet with padding, or `nil` when it is not base64 or not canonical.
    package static func decode(_ text: some Collection<UInt8>) -> Data? {
        if let data = text.withContiguousStorageIfAvailable({ decode(buffer: $0) }) { return data }
        return Array(text).withUnsafeBufferPointer { decode(buffer: $0) }
    }

    /// The decoding itself, in one pass over the bytes with a table (a sealed record's envelope is a kilobyte and
    /// more, read at every load): four characters of the alphabet make three bytes; only the last group may end in
    /// one or two `=`, and the bits its last character leaves unused must be zero.
    private static func decode(buffer text: UnsafeBufferPointer<UInt8>) -> Data? {
        let count = text.count
        guard count % 4 == 0 else { return nil }
        guard count > 0 else { return Data() }
        let padding = text[count - 1] != UInt8(ascii: "=") ? 0 : text[count - 2] != UInt8(ascii: "=") ? 1 : 2
        var data = Data(count: count / 4 * 3 - padding)
        let decoded = alphabetValues.withUnsafeBufferPointer { values in
            data.withUnsafeMutableBytes { (output: UnsafeMutableRawBufferPointer) -> Bool in
                var (input, written) = (0, 0)
                // Every group but a padded last one; a byte outside the alphabet is looked for once, at the end.
                let whole = padding == 0 ? count : count - 4
                var outside: UInt8 = 0
                while input < whole {
                    let (a, b, c, d) = (
                        values[Int(text[input])], values[Int(text[input + 1])], values[Int(text[input + 2])],
                        values[Int(text[input + 3])]
                    )
                    outside |= a | b | c | d
                    output[written] = a << 2 | b >> 4
                    output[written + 1] = (b & 0x0F) << 4 | c >> 2
                    output[written + 2] = (c & 0x03) << 6 | d
                    input += 4
                    written += 3
                }
                guard outside & 0xC0 == 0 else { return false }
                guard padding > 0 else { return true }
                let (a, b) = (values[Int(text[input])], values[Int(text[input + 1])])
                guard (a | b) & 0xC0 == 0 else { return false }
                output[written] = a << 2 | b >> 4
                if padding == 2 { return b & 0x0F == 0 }
                let c = values[Int(text[input + 2])]
                guard c & 0xC0 == 0, c & 0x03 == 0 else { return false }
                output[written + 1] = (b & 0x0F) << 4 | c >> 2
                return true
            }
        }
        return decoded ? data : nil
    }

    /// The value of each byte in the standard alphabet, `0xFF` for a byte outside it (`=` included).
    private static let alphabetValues: [UInt8] = {
        var values = [UInt8](repeating: 0xFF, count: 256)
        for (value, character) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8.enumerated() {
            values[Int(character)] = UInt8(value)
        }
        return values
    }()

    /// `bytes` in base64url without padding (RFC 4648 §5, as JWS uses it): the one spelling ``decodeURL(_:)`` reads.
    package static func encodeURL(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
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

}
