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
    package struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// Where reading stopped, as a byte offset.
        package var offset: Int
        package var description: String { "the credentials JSON is not readable at byte \(offset)" }
    }

    /// The credentials as JSON bytes.
    ///
    /// - Throws: `UserSessionError.Code.storeFailure` for a date that is not a finite number.
    package static func encode(_ credentials: Credentials) throws -> [UInt8] {
        var writer = Writer()
        writer.bytes.reserveCapacity(
            192 + credentials.accessToken.utf8.count + (credentials.refreshToken?.utf8.count ?? 0)
                + (credentials.idToken?.utf8.count ?? 0))
        writer.open()
        // Sorted: access_token, declined_permissions, expires_at, granted_permissions, id_token,
        // last_refreshed_at, refresh_token, source, token_type, version.
        writer.member("access_token", string: credentials.accessToken)
        writer.member("declined_permissions", strings: credentials.declinedPermissions.sorted())
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
        writer.bytes.append(contentsOf: String(Credentials.formatVersion).utf8)
        writer.bytes.append(UInt8(ascii: "}"))
        return writer.bytes
    }

    /// Reads credentials from `bytes`.
    ///
    /// - Throws: ``Failure`` for bytes that are not such a document; `UserSessionError.Code.unsupportedFormatVersion`
    ///   for a version newer than ``Credentials/formatVersion``.
    package static func decode(_ bytes: some ContiguousBytes) throws -> Credentials {
        try bytes.withUnsafeBytes { raw in try raw.withMemoryRebound(to: UInt8.self) { try decode(buffer: $0) } }
    }

    private static func decode(buffer: UnsafeBufferPointer<UInt8>) throws -> Credentials {
        var reader = Reader(bytes: buffer)
        var members = Members()
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
            default: try reader.skipValue()
            }
        }
        reader.skipWhitespace()
        guard reader.index == buffer.count else { throw reader.failure() }
        let version = members.version ?? 1
        guard version >= 1, version <= Credentials.formatVersion else {
            throw UserSessionError(.unsupportedFormatVersion, "credentials format version \(version) is not supported")
        }
        guard let accessToken = members.accessToken else { throw Failure(offset: buffer.count) }
        return Credentials(
            accessToken: accessToken,
            refreshToken: members.refreshToken,
            tokenType: members.tokenType,
            expiresAt: members.expiresAt.map(Date.init(timeIntervalSinceReferenceDate:)),
            lastRefreshedAt: members.lastRefreshedAt.map(Date.init(timeIntervalSinceReferenceDate:)),
            source: members.source.map(Credentials.Source.init(rawValue:)) ?? .external,
            grantedPermissions: Set(members.granted ?? []),
            declinedPermissions: Set(members.declined ?? []),
            idToken: members.idToken
        )
    }

    /// The names of the members ``decode(_:)`` reads, in the order of its `switch`.
    private static let memberNames: [StaticString] = [
        "access_token", "declined_permissions", "expires_at", "granted_permissions", "id_token", "last_refreshed_at",
        "refresh_token", "source", "token_type", "version",
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

    // MARK: - Reading

    /// A reader of RFC 8259 JSON over bytes, enough for the credentials and for skipping any member it does not
    /// know (nesting bounded as ``StrictJSONScan`` bounds it).
    private struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0
        private var depth = 0
        private static let maximumDepth = 128

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        func failure() -> Failure { Failure(offset: index) }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"): index += 1
                default: return
                }
            }
        }

        private mutating func peek() throws(Failure) -> UInt8 {
            skipWhitespace()
            guard index < bytes.count else { throw failure() }
            return bytes[index]
        }

        private mutating func expect(_ byte: UInt8) throws(Failure) {
            guard try peek() == byte else { throw failure() }
            index += 1
        }

        /// Reads an object, calling `member` for each member once the reader stands on its value, with the index of
        /// its name in `knownNames` or `nil` for another name; a repeated name is refused.
        mutating func readObject(
            knownNames: [StaticString] = [], _ member: (Int?, inout Reader) throws -> Void
        ) throws {
            try expect(UInt8(ascii: "{"))
            try enter()
            var seenKnown: UInt64 = 0
            var seenOthers: Set<String> = []
            if try peek() == UInt8(ascii: "}") {
                index += 1
                depth -= 1
                return
            }
            while true {
                let start = index
                let (known, other) = try readName(knownNames)
                let repeated: Bool
                if let known {
                    repeated = seenKnown & (1 << UInt64(known)) != 0
                    seenKnown |= 1 << UInt64(known)
                } else {
                    repeated = !seenOthers.insert(other ?? "").inserted
                }
                guard !repeated else {
                    index = start
                    throw failure()
                }
                try expect(UInt8(ascii: ":"))
                try member(known, &self)
                switch try peek() {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "}"):
                    index += 1
                    depth -= 1
                    return
                default: throw failure()
                }
            }
        }

        /// A member's name: its index in `knownNames` (at most 64 of them), or the name itself. A name without
        /// escapes is matched on its bytes, never turned into a string.
        private mutating func readName(_ knownNames: [StaticString]) throws(Failure) -> (known: Int?, other: String?) {
            guard try peek() == UInt8(ascii: "\"") else { throw failure() }
            let end = Self.plainRunEnd(bytes, from: index + 1)
            if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
                let name = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[(index + 1)..<end])
                if let known = knownNames.firstIndex(where: { known in
                    known.utf8CodeUnitCount == name.count
                        && known.withUTF8Buffer { expected in
                            guard let left = expected.baseAddress, let right = name.baseAddress else { return true }
                            return memcmp(left, right, name.count) == 0
                        }
                }) {
                    index = end + 1
                    return (known, nil)
                }
            }
            let name = try readString()
            let known = knownNames.firstIndex { known in known.withUTF8Buffer { $0.elementsEqual(name.utf8) } }
            return (known, known == nil ? name : nil)
        }

        private mutating func enter() throws(Failure) {
            depth += 1
            guard depth <= Self.maximumDepth else { throw failure() }
        }

        /// `nil` for `null`, otherwise what `read` reads.
        mutating func readNullable<Value>(_ read: (inout Reader) throws -> Value) throws -> Value? {
            if try peek() == UInt8(ascii: "n") {
                try readLiteral("null")
                return nil
            }
            return try read(&self)
        }

        private mutating func readLiteral(_ literal: StaticString) throws(Failure) {
            let count = literal.utf8CodeUnitCount
            guard bytes.count - index >= count else { throw failure() }
            let matches = literal.withUTF8Buffer { expected in
                expected.indices.allSatisfy { bytes[index + $0] == expected[$0] }
            }
            guard matches else { throw failure() }
            index += count
        }

        mutating func readStrings() throws -> [String] {
            try expect(UInt8(ascii: "["))
            var strings: [String] = []
            if try peek() == UInt8(ascii: "]") {
                index += 1
                return strings
            }
            while true {
                strings.append(try readString())
                switch try peek() {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "]"):
                    index += 1
                    return strings
                default: throw failure()
                }
            }
        }

        mutating func readString() throws(Failure) -> String {
            try expect(UInt8(ascii: "\""))
            let start = index
            // The common case, no escape: one validation of the bytes between the quotes.
            let end = Self.plainRunEnd(bytes, from: start)
            index = end
            guard end < bytes.count, bytes[end] != UInt8(ascii: "\\") else { return try readEscapedString(from: start) }
            guard bytes[end] == UInt8(ascii: "\""),
                let string = String(validating: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
            else { throw failure() }
            index = end + 1
            return string
        }

        /// The index of the first byte from `start` on that ends a run of string content without escapes: a quote,
        /// a backslash or a control character (or the end). Eight bytes are tested at a time, since a token is
        /// hundreds of bytes of plain ASCII.
        static func plainRunEnd(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
            let ones: UInt64 = 0x0101_0101_0101_0101
            let highs: UInt64 = 0x8080_8080_8080_8080
            var end = start
            if let base = bytes.baseAddress {
                while end + 8 <= bytes.count {
                    let word = UInt64(littleEndian: UnsafeRawPointer(base + end).loadUnaligned(as: UInt64.self))
                    // A byte below 0x20, or equal to a quote or a backslash, sets its high bit in `hit`.
                    let quote = word ^ (ones &* 0x22)
                    let backslash = word ^ (ones &* 0x5C)
                    let control = (word &- ones &* 0x20) & ~word
                    let hit = (control | (quote &- ones) & ~quote | (backslash &- ones) & ~backslash) & highs
                    if hit != 0 { break }
                    end += 8
                }
            }
            while end < bytes.count, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\"),
                bytes[end] >= 0x20
            {
                end += 1
            }
            return end
        }

        /// The rest of a string that has an escape: `start` is its first byte, the reader stands on the escape.
        private mutating func readEscapedString(from start: Int) throws(Failure) -> String {
            var decoded = Array(bytes[start..<index])
            while index < bytes.count {
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    guard let string = String(validating: decoded, as: UTF8.self) else { throw failure() }
                    return string
                case UInt8(ascii: "\\"):
                    index += 1
                    guard
                        JSONEscape.decode(
                            UnsafeRawBufferPointer(bytes), at: &index, into: &decoded, loneSurrogate: .refused)
                    else { throw failure() }
                case 0..<0x20:
                    throw failure()
                default:
                    decoded.append(byte)
                    index += 1
                }
            }
            throw failure()
        }

        /// The bytes of a number, checked against RFC 8259's grammar.
        private mutating func numberText() throws(Failure) -> String {
            _ = try peek()
            let start = index
            if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count else { throw failure() }
            if bytes[index] == UInt8(ascii: "0") {
                index += 1
            } else {
                guard skipDigits() else { throw failure() }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard skipDigits() else { throw failure() }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                    index += 1
                }
                guard skipDigits() else { throw failure() }
            }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }

        private mutating func skipDigits() -> Bool {
            let start = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return index > start
        }

        mutating func readNumber() throws(Failure) -> Double {
            let start = index
            guard let value = Double(try numberText()), value.isFinite else {
                index = start
                throw failure()
            }
            return value
        }

        /// An integer, also when spelled with a fraction of zero or an exponent (as the Foundation decoder reads
        /// an `Int`).
        mutating func readInteger() throws(Failure) -> Int {
            let start = index
            let text = try numberText()
            if let integer = Int(text) { return integer }
            guard let value = Double(text), value == value.rounded(), let integer = Int(exactly: value) else {
                index = start
                throw failure()
            }
            return integer
        }

        /// Skips one value of any kind, checking it as it goes.
        mutating func skipValue() throws {
            switch try peek() {
            case UInt8(ascii: "{"): try readObject { _, reader in try reader.skipValue() }
            case UInt8(ascii: "["):
                index += 1
                try enter()
                if try peek() == UInt8(ascii: "]") {
                    index += 1
                    depth -= 1
                    return
                }
                while true {
                    try skipValue()
                    switch try peek() {
                    case UInt8(ascii: ","): index += 1
                    case UInt8(ascii: "]"):
                        index += 1
                        depth -= 1
                        return
                    default: throw failure()
                    }
                }
            case UInt8(ascii: "\""): _ = try readString()
            case UInt8(ascii: "t"): try readLiteral("true")
            case UInt8(ascii: "f"): try readLiteral("false")
            case UInt8(ascii: "n"): try readLiteral("null")
            default: _ = try numberText()
            }
        }
    }
}
