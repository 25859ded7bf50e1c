/// One escape of a JSON string (RFC 8259 §7) decoded to UTF-8: the strict scan reads member names with it, and the
/// credentials' reader (``CredentialsJSON``) their strings.
enum JSONEscape {
    /// What a `\u` escape of a surrogate that is not part of a pair becomes.
    enum LoneSurrogate {
        /// U+FFFD, as a lenient decoder makes it (the scan must agree with the decoder after it).
        case replaced
        /// Nothing: the string is refused.
        case refused
    }

    /// Decodes the escape that starts at `offset` in `bytes` (the byte after the backslash), appends its UTF-8 to
    /// `output` and moves `offset` past it. Returns `false` for an escape JSON does not have, a `\u` without four hex
    /// digits, or a lone surrogate when `loneSurrogate` is ``LoneSurrogate/refused``.
    static func decode(
        _ bytes: UnsafeRawBufferPointer, at offset: inout Int, into output: inout [UInt8], loneSurrogate: LoneSurrogate
    ) -> Bool {
        guard offset < bytes.count else { return false }
        let escaped = bytes[offset]
        offset += 1
        switch escaped {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): output.append(escaped)
        case UInt8(ascii: "b"): output.append(0x08)
        case UInt8(ascii: "f"): output.append(0x0C)
        case UInt8(ascii: "n"): output.append(0x0A)
        case UInt8(ascii: "r"): output.append(0x0D)
        case UInt8(ascii: "t"): output.append(0x09)
        case UInt8(ascii: "u"):
            guard let scalar = unicodeScalar(bytes, at: &offset, loneSurrogate: loneSurrogate) else { return false }
            output.append(contentsOf: String(Character(scalar)).utf8)
        default:
            return false
        }
        return true
    }

    /// The scalar of the four hex digits at `offset` (and of a low surrogate's escape after a high one).
    private static func unicodeScalar(
        _ bytes: UnsafeRawBufferPointer, at offset: inout Int, loneSurrogate: LoneSurrogate
    ) -> Unicode.Scalar? {
        guard let first = hex4(bytes, at: &offset) else { return nil }
        let lone: Unicode.Scalar? = loneSurrogate == .replaced ? "\u{FFFD}" : nil
        if (0xD800...0xDBFF).contains(first) {
            if bytes.count - offset >= 6, bytes[offset] == UInt8(ascii: "\\"), bytes[offset + 1] == UInt8(ascii: "u") {
                let mark = offset
                offset += 2
                guard let second = hex4(bytes, at: &offset) else { return nil }
                if (0xDC00...0xDFFF).contains(second) {
                    return Unicode.Scalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
                }
                offset = mark  // Not a low surrogate: it is read as an escape of its own.
            }
            return lone
        }
        return Unicode.Scalar(first) ?? lone
    }

    private static func hex4(_ bytes: UnsafeRawBufferPointer, at offset: inout Int) -> UInt32? {
        guard bytes.count - offset >= 4 else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[offset]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
            offset += 1
        }
        return value
    }
}
