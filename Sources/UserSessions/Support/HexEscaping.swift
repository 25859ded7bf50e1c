/// The one byte-escaping encoder of the package: keeps the bytes a predicate allows and writes every other byte as
/// an escape character followed by two hex digits.
///
/// Form bodies use it as RFC 3986 percent-encoding (`%` and uppercase digits, ``FormURLEncoding``); identifiers use
/// it for their file-safe names (`_` and lowercase digits, ``IdentifierEncoding``).
package struct HexEscaping: Sendable {
    /// The byte written before the two hex digits of an escaped byte.
    var escape: UInt8
    /// Whether the digits `a`–`f` are written in uppercase.
    var uppercase: Bool
    /// Whether a byte is written as it is.
    var keeps: @Sendable (UInt8) -> Bool

    /// Appends the encoded form of `bytes` to `output`, stopping early (returning `false`) once `output` would grow
    /// past `limit` bytes; `true` when everything was written.
    @discardableResult
    func append(_ bytes: some Sequence<UInt8>, to output: inout [UInt8], limit: Int = .max) -> Bool {
        for byte in bytes {
            if keeps(byte) {
                output.append(byte)
            } else {
                output.append(escape)
                output.append(Self.digit(byte >> 4, uppercase: uppercase))
                output.append(Self.digit(byte & 0x0F, uppercase: uppercase))
            }
            if output.count > limit { return false }
        }
        return true
    }

    /// The encoded form of `string`'s UTF-8 bytes.
    func encode(_ string: String) -> String {
        var encoded: [UInt8] = []
        encoded.reserveCapacity(string.utf8.count)
        append(string.utf8, to: &encoded)
        return String(decoding: encoded, as: UTF8.self)
    }

    /// The value of a hex digit in this encoder's case, or `nil` for any other byte.
    func value(ofDigit digit: UInt8) -> UInt8? {
        let letters = uppercase ? UInt8(ascii: "A")...UInt8(ascii: "F") : UInt8(ascii: "a")...UInt8(ascii: "f")
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit - UInt8(ascii: "0")
        case letters: return digit - letters.lowerBound + 10
        default: return nil
        }
    }

    /// `bytes` as lowercase hex digits, two per byte, every byte escaped and no escape character: a digest as a
    /// file name or a store key.
    package static func lowercaseDigits(of bytes: some Sequence<UInt8>) -> String {
        if let digits = bytes.withContiguousStorageIfAvailable({ lowercaseDigits(of: UnsafeRawBufferPointer($0)) }) {
            return digits
        }
        return lowercaseDigits(of: Array(bytes))
    }

    /// `bytes` as lowercase hex digits, written straight into the string's storage (a digest per request: no
    /// generic iteration, no intermediate array).
    package static func lowercaseDigits(of bytes: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { output in
            for (index, byte) in bytes.enumerated() {
                output[2 * index] = digit(byte >> 4, uppercase: false)
                output[2 * index + 1] = digit(byte & 0x0F, uppercase: false)
            }
            return bytes.count * 2
        }
    }

    private static func digit(_ nibble: UInt8, uppercase: Bool) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : (uppercase ? UInt8(ascii: "A") : UInt8(ascii: "a")) + nibble - 10
    }
}
