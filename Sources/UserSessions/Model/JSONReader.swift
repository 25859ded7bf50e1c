import Foundation

/// A reader of RFC 8259 JSON over bytes that reads the members it is asked for and checks and skips the rest
/// (nesting bounded as ``StrictJSONScan`` bounds it, a repeated member refused). ``CredentialsJSON`` reads the
/// credentials with it, and the OpenID Connect module a JOSE header: small documents of a known shape, where the
/// Foundation decoders cost more than the work.
package struct JSONReader {
    /// Why a document could not be read. It never quotes the document, which may hold secrets.
    package struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// Where reading stopped, as a byte offset.
        package var offset: Int
        package var description: String { "the JSON is not readable at byte \(offset)" }
    }

    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    private var depth = 0
    private static let maximumDepth = 128

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// Runs `read` over `document` and checks that nothing but whitespace follows what it read.
    package static func read<Value>(
        _ document: some ContiguousBytes, _ read: (inout JSONReader) throws -> Value
    ) throws -> Value {
        try document.withUnsafeBytes { raw in
            try raw.withMemoryRebound(to: UInt8.self) { buffer in
                var reader = JSONReader(bytes: buffer)
                let value = try read(&reader)
                reader.skipWhitespace()
                guard reader.index == buffer.count else { throw reader.failure() }
                return value
            }
        }
    }

    package func failure() -> Failure { Failure(offset: index) }

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
    package mutating func readObject(
        knownNames: [StaticString] = [], _ member: (Int?, inout JSONReader) throws -> Void
    ) throws {
        try readMembers(knownNames: knownNames) { known, _, reader in try member(known, &reader) }
    }

    /// ``readObject(knownNames:_:)``, also giving `member` the name of a member not in `knownNames`.
    private mutating func readMembers(
        knownNames: [StaticString], _ member: (Int?, String?, inout JSONReader) throws -> Void
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
            try member(known, other, &self)
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

    /// The string at the reader, or `nil` after skipping a value of another kind.
    package mutating func readStringIfString() throws -> String? {
        if try peek() == UInt8(ascii: "\"") { return try readString() }
        try skipValue()
        return nil
    }

    /// `nil` for `null`, otherwise what `read` reads.
    package mutating func readNullable<Value>(_ read: (inout JSONReader) throws -> Value) throws -> Value? {
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

    package mutating func readStrings() throws -> [String] {
        var strings: [String] = []
        try readElements { reader in strings.append(try reader.readString()) }
        return strings
    }

    /// Reads an array, calling `element` once the reader stands on each element.
    private mutating func readElements(_ element: (inout JSONReader) throws -> Void) throws {
        try expect(UInt8(ascii: "["))
        try enter()
        if try peek() == UInt8(ascii: "]") {
            index += 1
            depth -= 1
            return
        }
        while true {
            try element(&self)
            switch try peek() {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"):
                index += 1
                depth -= 1
                return
            default: throw failure()
            }
        }
    }

    package mutating func readString() throws(Failure) -> String {
        try expect(UInt8(ascii: "\""))
        let start = index
        // The common case, no escape: one validation of the bytes between the quotes.
        let end = Self.plainRunEnd(bytes, from: start)
        index = end
        guard end < bytes.count, bytes[end] != UInt8(ascii: "\\") else { return try readEscapedString(from: start) }
        let run = UnsafeBufferPointer(rebasing: bytes[start..<end])
        // ASCII needs no validation: a token is hundreds of ASCII bytes, and the generic validating initializer
        // cost more than the reading.
        guard bytes[end] == UInt8(ascii: "\""),
            let string = Self.isASCII(run)
                ? String(decoding: run, as: UTF8.self) : String(validating: run, as: UTF8.self)
        else { throw failure() }
        index = end + 1
        return string
    }

    /// Whether every byte of `run` is below 0x80, tested eight at a time.
    static func isASCII(_ run: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = run.baseAddress else { return true }
        var (offset, seen): (Int, UInt64) = (0, 0)
        while offset + 8 <= run.count {
            seen |= UnsafeRawPointer(base + offset).loadUnaligned(as: UInt64.self)
            offset += 8
        }
        while offset < run.count {
            seen |= UInt64(run[offset])
            offset += 1
        }
        return seen & 0x8080_8080_8080_8080 == 0
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

    package mutating func readNumber() throws(Failure) -> Double {
        let start = index
        guard let value = Double(try numberText()), value.isFinite else {
            index = start
            throw failure()
        }
        return value
    }

    /// An integer, also when spelled with a fraction of zero or an exponent (as the Foundation decoder reads
    /// an `Int`).
    package mutating func readInteger() throws(Failure) -> Int {
        let start = index
        let text = try numberText()
        if let integer = Int(text) { return integer }
        guard let value = Double(text), value == value.rounded(), let integer = Int(exactly: value) else {
            index = start
            throw failure()
        }
        return integer
    }

    /// Any value, as a tree: what `JSONDecoder` would make of it, with a repeated member refused. A number without
    /// a fraction or an exponent that fits an `Int64` is an integer, any other a finite `Double`.
    package mutating func readParsedJSON() throws -> ParsedJSON {
        switch try peek() {
        case UInt8(ascii: "{"):
            var object: [String: ParsedJSON] = [:]
            try readMembers(knownNames: []) { _, name, reader in object[name ?? ""] = try reader.readParsedJSON() }
            return .object(object)
        case UInt8(ascii: "["):
            var array: [ParsedJSON] = []
            try readElements { reader in array.append(try reader.readParsedJSON()) }
            return .array(array)
        case UInt8(ascii: "\""): return .string(try readString())
        case UInt8(ascii: "t"):
            try readLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try readLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try readLiteral("null")
            return .null
        default:
            let start = index
            let text = try numberText()
            if let integer = Int64(text) { return .integer(integer) }
            guard let number = Double(text), number.isFinite else {
                index = start
                throw failure()
            }
            return .number(number)
        }
    }

    /// Skips one value of any kind, checking it as it goes.
    package mutating func skipValue() throws {
        switch try peek() {
        case UInt8(ascii: "{"): try readObject { _, reader in try reader.skipValue() }
        case UInt8(ascii: "["): try readElements { reader in try reader.skipValue() }
        case UInt8(ascii: "\""): _ = try readString()
        case UInt8(ascii: "t"): try readLiteral("true")
        case UInt8(ascii: "f"): try readLiteral("false")
        case UInt8(ascii: "n"): try readLiteral("null")
        default: _ = try numberText()
        }
    }
}
