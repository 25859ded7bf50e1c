/// `application/x-www-form-urlencoded` bodies and query strings, encoded strictly.
///
/// Every byte of a name's or value's UTF-8 form except the RFC 3986 unreserved characters (`A`–`Z`, `a`–`z`,
/// `0`–`9`, `-`, `.`, `_`, `~`) becomes `%XX` with uppercase hex digits. A space is always `%20` and a plus sign
/// always `%2B`, so a decoder that reads `+` as a space and one that does not both get the original back. Used by
/// the remote token store and by the OAuth refresher (request bodies, and RFC 6749 §2.3.1's encoding of the client
/// id and secret before HTTP Basic authentication).
enum FormURLEncoding {
    /// Encodes `fields` in order as `name=value&name=value`.
    static func encode(_ fields: [(name: String, value: String)]) -> String {
        fields.map { percentEncode($0.name) + "=" + percentEncode($0.value) }.joined(separator: "&")
    }

    /// Percent-encodes everything but unreserved characters.
    static func percentEncode(_ string: String) -> String {
        percentEncoding.encode(string)
    }

    private static let percentEncoding = HexEscaping(escape: UInt8(ascii: "%"), uppercase: true) { byte in
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            true
        default:
            false
        }
    }
}
