import Foundation

/// The package's JSON form of ``Credentials`` (the form of their `Codable` conformance, keys sorted), written and
/// read without `JSONEncoder` and `JSONDecoder`.
///
/// Sealing writes and reads this form on every store call, where the Foundation coders cost about ten times the
/// AES-GCM they wrap. The bytes are the ones `JSONEncoder` with `.sortedKeys` gives for the same credentials, up to
/// the spelling of numbers and escapes, so either side reads what the other wrote:
/// - ``encode(_:)`` writes the members in sorted order, absent optionals left out, the permissions sorted, dates as
///   seconds since the reference date (the coders' default), strings escaped as RFC 8259 asks;
/// - ``decode(_:)`` reads what `init(from:)` reads, with the same defaults and the same refusal of a newer format
///   version, skips members it does not know, and refuses a duplicate member, anything that is not JSON and
///   anything after the object.
package enum CredentialsJSON {
    /// Why a document is not credentials in this form. It never quotes the document, which holds secrets.
    package typealias Failure = JSONReader.Failure

    /// The credentials as JSON bytes.
    ///
    /// - Throws: `UserSessionError.Code.storeFailure` for a date that is not a finite number.
    package static func encode(_ credentials: Credentials) throws -> [UInt8] {
        var writer = Writer()
        writer.bytes.reserveCapacity(
            192 + credentials.accessToken.utf8.count + (credentials.refreshToken?.utf8.count ?? 0)
                + (credentials.idToken?.utf8.count ?? 0))
        writer.open()
        // Sorted: access_token, declined_permissions, dpop_key, expires_at, granted_permissions, id_token,
        // last_refreshed_at, refresh_token, source, token_type, version.
        writer.member("access_token", string: credentials.accessToken)
        writer.member("declined_permissions", strings: credentials.declinedPermissions.sorted())
        if let dpopKey = credentials.dpopKey { writer.member("dpop_key", string: dpopKey.storedForm) }
        if let expiresAt = credentials.expiresAt { try writer.member("expires_at", date: expiresAt) }
        writer.member("granted_permissions", strings: credentials.grantedPermissions.sorted())
        if let idToken = credentials.idToken { writer.member("id_token", string: idToken) }
        if let lastRefreshedAt = credentials.lastRefreshedAt {
            try writer.member("last_refreshed_at", date: lastRefreshedAt)
        }
        if let refreshToken = credentials.refreshToken { writer.member("refresh_token", string: refreshToken) }
        writer.member("source", string: credentials.source.rawValue)
        if let tokenType = credentials.tokenType { writer.member("token_type", string: tokenType) }
        writer.name("version")
        writer.bytes.append(contentsOf: String(credentials.encodedVersion).utf8)
        writer.bytes.append(UInt8(ascii: "}"))
        return writer.bytes
    }

    /// Reads credentials from `bytes`.
    ///
    /// - Throws: ``Failure`` for bytes that are not such a document; `UserSessionError.Code.unsupportedFormatVersion`
    ///   for a version newer than ``Credentials/formatVersion``.
    package static func decode(_ bytes: some ContiguousBytes) throws -> Credentials {
        var members = Members()
        let count = try JSONReader.read(bytes) { reader in
            try reader.readObject(knownNames: memberNames) { member, reader in
                switch member {
                case 0: members.accessToken = try reader.readNullable { try $0.readString() }
                case 1: members.declined = try reader.readNullable { try $0.readStrings() }
                case 2: members.expiresAt = try reader.readNullable { try $0.readNumber() }
                case 3: members.granted = try reader.readNullable { try $0.readStrings() }
                case 4: members.idToken = try reader.readNullable { try $0.readString() }
                case 5: members.lastRefreshedAt = try reader.readNullable { try $0.readNumber() }
                case 6: members.refreshToken = try reader.readNullable { try $0.readString() }
                case 7: members.source = try reader.readNullable { try $0.readString() }
                case 8: members.tokenType = try reader.readNullable { try $0.readString() }
                case 9: members.version = try reader.readNullable { try $0.readInteger() }
                case 10: members.dpopKey = try reader.readNullable { try $0.readString() }
                default: try reader.skipValue()
                }
            }
            return reader.bytes.count
        }
        let version = members.version ?? 1
        guard version >= 1, version <= Credentials.formatVersion else {
            throw UserSessionError(.unsupportedFormatVersion, "credentials format version \(version) is not supported")
        }
        guard let accessToken = members.accessToken else { throw Failure(offset: count) }
        var dpopKey: DPoPKey?
        if let stored = members.dpopKey {
            guard let key = DPoPKey(storedForm: stored) else { throw Failure(offset: count) }
            dpopKey = key
        }
        return Credentials(
            accessToken: accessToken,
            refreshToken: members.refreshToken,
            tokenType: members.tokenType,
            expiresAt: members.expiresAt.map(Date.init(timeIntervalSinceReferenceDate:)),
            lastRefreshedAt: members.lastRefreshedAt.map(Date.init(timeIntervalSinceReferenceDate:)),
            source: members.source.map(Credentials.Source.init(rawValue:)) ?? .external,
            grantedPermissions: Set(members.granted ?? []),
            declinedPermissions: Set(members.declined ?? []),
            idToken: members.idToken,
            dpopKey: dpopKey
        )
    }

    /// The names of the members ``decode(_:)`` reads, in the order of its `switch`.
    private static let memberNames: [StaticString] = [
        "access_token", "declined_permissions", "expires_at", "granted_permissions", "id_token", "last_refreshed_at",
        "refresh_token", "source", "token_type", "version", "dpop_key",
    ]

    /// The members read so far; `nil` is absent or `null`, as `decodeIfPresent` treats both.
    private struct Members {
        var version: Int?
        var accessToken: String?
        var refreshToken: String?
        var tokenType: String?
        var expiresAt: Double?
        var lastRefreshedAt: Double?
        var source: String?
        var granted: [String]?
        var declined: [String]?
        var idToken: String?
        var dpopKey: String?
    }

    // MARK: - Writing

    private struct Writer {
        var bytes: [UInt8] = []
        private var first = true

        mutating func open() { bytes.append(UInt8(ascii: "{")) }

        mutating func name(_ name: StaticString) {
            if !first { bytes.append(UInt8(ascii: ",")) }
            first = false
            bytes.append(UInt8(ascii: "\""))
            name.withUTF8Buffer { bytes.append(contentsOf: $0) }
            bytes.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
        }

        mutating func member(_ name: StaticString, string: String) {
            self.name(name)
            append(string)
        }

        mutating func member(_ name: StaticString, strings: [String]) {
            self.name(name)
            bytes.append(UInt8(ascii: "["))
            for (index, string) in strings.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                append(string)
            }
            bytes.append(UInt8(ascii: "]"))
        }

        mutating func member(_ name: StaticString, date: Date) throws {
            let seconds = date.timeIntervalSinceReferenceDate
            guard seconds.isFinite else {
                throw UserSessionError(.storeFailure, "a date of the credentials is not a finite number")
            }
            self.name(name)
            // Whole seconds as an integer, as the Foundation encoder writes them; otherwise the shortest spelling
            // that reads back as the same Double (Swift's description, which JSON accepts as a number).
            if seconds == seconds.rounded(), abs(seconds) < 9_007_199_254_740_992 {
                bytes.append(contentsOf: String(Int64(seconds)).utf8)
            } else {
                bytes.append(contentsOf: seconds.description.utf8)
            }
        }

        /// `string` in quotes, escaped as RFC 8259 §7 requires: the quote, the backslash and the controls. Runs of
        /// bytes that need no escape (a whole token, as a rule) are appended at once.
        private mutating func append(_ string: String) {
            bytes.append(UInt8(ascii: "\""))
            var string = string
            string.withUTF8 { utf8 in
                var runStart = 0
                for (index, byte) in utf8.enumerated() where byte < 0x20 || byte == 0x22 || byte == 0x5C {
                    bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
                    runStart = index + 1
                    appendEscaped(byte)
                }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart...]))
            }
            bytes.append(UInt8(ascii: "\""))
        }

        private mutating func appendEscaped(_ byte: UInt8) {
            bytes.append(UInt8(ascii: "\\"))
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(byte)
            case UInt8(ascii: "\n"): bytes.append(UInt8(ascii: "n"))
            case UInt8(ascii: "\r"): bytes.append(UInt8(ascii: "r"))
            case UInt8(ascii: "\t"): bytes.append(UInt8(ascii: "t"))
            default:
                bytes.append(contentsOf: "u00".utf8)
                bytes.append(contentsOf: HexEscaping.lowercaseDigits(of: CollectionOfOne(byte)).utf8)
            }
        }
    }
}
