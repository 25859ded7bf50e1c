#if Hummingbird || Vapor
import Crypto
import Foundation
import UserSessions

/// The key a browser record is stored under: the SHA-256 of the cookie's value, in lowercase hex.
///
/// Stores only ever see this hash, never the cookie's value, so a leaked store (a backup, a row dump) cannot be
/// replayed as a cookie. Its description shows the first 8 hex digits only.
public struct WebSessionKey: Sendable, Hashable, CustomStringConvertible {
    /// The SHA-256 of the cookie's value, 64 lowercase hex digits.
    public let hash: String

    /// The key of a cookie value.
    init(cookieValue: String) {
        var cookieValue = cookieValue
        let digest = cookieValue.withUTF8 { SHA256.hash(data: UnsafeRawBufferPointer($0)) }
        hash = digest.withUnsafeBytes { HexEscaping.lowercaseDigits(of: $0) }
    }

    /// A key from its hash, as a store reads it back (64 lowercase hex digits), or `nil` for anything else.
    public init?(hash: String) {
        guard hash.utf8.count == 64,
            hash.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) })
        else { return nil }
        self.hash = hash
    }

    /// `WebSessionKey(1a2b3c4d…)`.
    public var description: String { "WebSessionKey(\(hash.prefix(8))…)" }
}

/// The browser's cookie value: 256 random bits from the system's secure generator, base64url without padding.
enum WebSessionCookieValue {
    /// The length of a value: 43 characters.
    static let length = 43

    /// A new value.
    static func random() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Whether `value` has the shape of a value this library issued (anything else is not looked up).
    static func isWellFormed(_ value: Substring) -> Bool {
        value.utf8.count == length
            && value.utf8.allSatisfy { byte in
                (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                    || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
            }
    }
}
#endif
