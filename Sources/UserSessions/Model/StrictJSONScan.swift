import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A byte-level pass over untrusted JSON, run before Foundation decodes it, that rejects what Foundation would accept
/// silently. Every parser of untrusted JSON in the package reaches it through ``StrictJSON``, the one entry point
/// that scans and then decodes.
///
/// - Duplicate members: two members of one object whose names are equal once their escapes are decoded, compared
///   with `String` equality — the equality the decoders' dictionaries use, so `"id"` and `"\u0069d"`, and
///   canonically equivalent spellings such as `"caf\u00e9"` and `"cafe\u0301"`, are duplicates. RFC 8259 leaves
///   such a document's meaning open and implementations disagree (Foundation keeps the first member, others the
///   last), so a proxy or a token cache could act on a different value than we do: the document is refused.
/// - Depth: more than ``maximumDepth`` arrays and objects nested in each other. No response read here needs more;
///   refusing early keeps the recursive decoders far from their own limits.
/// - Syntax: anything that is not RFC 8259 JSON text in UTF-8 (an optional UTF-8 byte order mark is skipped).
///   Numbers and structure are checked exactly, so the scan and the decoder always agree on where every member
///   starts and ends. The contents of strings other than member names are not validated (the decoder does that).
///
/// The scan does not recurse and allocates nothing per value beyond the names of the members of the objects that
/// are open (one `Set<String>` per open object), plus one reused buffer for decoding names. Strings are skipped
/// with `memchr`, so a 50 MB string costs a few milliseconds even in a debug build.
package enum StrictJSONScan {
    /// The deepest nesting accepted: 128 arrays or objects.
    static let maximumDepth = 128

    /// One step of a path into a document: a member name or an array index.
    enum PathComponent: Sendable, Hashable {
        case member(String)
        case index(Int)
    }

    /// Why a document was refused.
    package struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        enum Problem: Sendable, Hashable {
            /// An object has two members with equal names; ``Failure/path`` leads to the second one.
            case duplicateMember
            /// More than ``StrictJSONScan/maximumDepth`` levels of nesting.
            case tooDeep
            /// Not JSON.
            case invalidSyntax
        }

        var problem: Problem
        /// For ``Problem/duplicateMember``: the path to the duplicate, outermost first, ending in its name.
        /// Empty otherwise. Names come from the document: never put them in messages unchecked.
        var path: [PathComponent] = []
        /// The byte offset where the problem was found.
        var offset: Int

        /// The problem and where it is, without any name from the document (one may be a secret).
        package var description: String {
            switch problem {
            case .duplicateMember: "a member name appears twice in one object (byte \(offset))"
            case .tooDeep: "nested more than \(StrictJSONScan.maximumDepth) levels deep (byte \(offset))"
            case .invalidSyntax: "not valid JSON (byte \(offset))"
            }
        }
    }

    /// Scans `data`.
    ///
    /// - Returns: The number of object members in the document (all objects together).
    /// - Throws: ``Failure``.
    @discardableResult
    static func check(_ data: Data) throws(Failure) -> Int {
        try data.withUnsafeBytes(scan).get()
    }

    /// Scans `bytes`; see ``check(_:)-(Data)``.
    @discardableResult
    static func check(_ bytes: [UInt8]) throws(Failure) -> Int {
        try bytes.withUnsafeBytes(scan).get()
    }

    /// Scans the UTF-8 form of `text`; see ``check(_:)-(Data)``.
    @discardableResult
    static func check(_ text: String) throws(Failure) -> Int {
        var text = text
        return try text.withUTF8 { scan(UnsafeRawBufferPointer($0)) }.get()
    }

    private static func scan(_ bytes: UnsafeRawBufferPointer) -> Result<Int, Failure> {
        var scanner = Scanner(bytes: bytes)
        return scanner.run()
    }

    /// Renders a duplicate's path as `result.user.id` or `scope[1]`, but only when every member name on it is one
    /// of `knownNames` (names from the document could be anything, a token included); `nil` otherwise.
    static func path(_ components: [PathComponent], ifEveryNameIsIn knownNames: Set<String>) -> String? {
        var path = ""
        for component in components {
            switch component {
            case .member(let name):
                guard knownNames.contains(name) else { return nil }
                path = path.isEmpty ? name : path + "." + name
            case .index(let index):
                path += "[\(index)]"
            }
        }
        return path.isEmpty ? nil : path
    }
}

extension StrictJSONScan {
    /// The scan itself: an explicit stack instead of recursion.
    private struct Scanner {
        /// One open array or object.
        private struct Frame {
            var isObject: Bool
            /// The names seen so far (objects only).
            var names: Set<String> = []
            /// The name of the member being read (objects), for the path of a later duplicate.
            var currentName: String = ""
            /// The index of the element being read (arrays).
            var index = 0
        }

        /// What may come next.
        private enum Expectation {
            case value
            case valueOrArrayEnd
            case nameOrObjectEnd
            case name
            case colon
            case separatorOrEnd
        }

        let bytes: UnsafeRawBufferPointer
        private var offset = 0
        private var frames: [Frame] = []
        private var nameBuffer: [UInt8] = []
        private var members = 0

        init(bytes: UnsafeRawBufferPointer) {
            self.bytes = bytes
        }

        mutating func run() -> Result<Int, Failure> {
            // An optional UTF-8 byte order mark.
            if bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF { offset = 3 }
            var expectation = Expectation.value
            while true {
                skipWhitespace()
                switch expectation {
                case .value, .valueOrArrayEnd:
                    guard offset < bytes.count else { return invalid() }
                    let byte = bytes[offset]
                    if expectation == .valueOrArrayEnd, byte == UInt8(ascii: "]") {
                        offset += 1
                        frames.removeLast()
                        expectation = .separatorOrEnd
                        continue
                    }
                    switch byte {
                    case UInt8(ascii: "{"), UInt8(ascii: "["):
                        guard frames.count < StrictJSONScan.maximumDepth else {
                            return .failure(Failure(problem: .tooDeep, offset: offset))
                        }
                        let isObject = byte == UInt8(ascii: "{")
                        frames.append(Frame(isObject: isObject))
                        offset += 1
                        expectation = isObject ? .nameOrObjectEnd : .valueOrArrayEnd
                        continue
                    case UInt8(ascii: "\""):
                        guard skipString() else { return invalid() }
                    case UInt8(ascii: "t"):
                        guard skipLiteral("true") else { return invalid() }
                    case UInt8(ascii: "f"):
                        guard skipLiteral("false") else { return invalid() }
                    case UInt8(ascii: "n"):
                        guard skipLiteral("null") else { return invalid() }
                    case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                        guard skipNumber() else { return invalid() }
                    default:
                        return invalid()
                    }
                    expectation = .separatorOrEnd
                case .nameOrObjectEnd, .name:
                    guard offset < bytes.count else { return invalid() }
                    if expectation == .nameOrObjectEnd, bytes[offset] == UInt8(ascii: "}") {
                        offset += 1
                        frames.removeLast()
                        expectation = .separatorOrEnd
                        continue
                    }
                    let start = offset
                    guard bytes[offset] == UInt8(ascii: "\""), let name = readName() else { return invalid() }
                    members += 1
                    let top = frames.count - 1
                    guard frames[top].names.insert(name).inserted else {
                        return .failure(Failure(problem: .duplicateMember, path: path(ending: name), offset: start))
                    }
                    frames[top].currentName = name
                    expectation = .colon
                case .colon:
                    guard offset < bytes.count, bytes[offset] == UInt8(ascii: ":") else { return invalid() }
                    offset += 1
                    expectation = .value
                case .separatorOrEnd:
                    guard let top = frames.last else {
                        // The top-level value is complete: only whitespace may follow.
                        return offset == bytes.count ? .success(members) : invalid()
                    }
                    guard offset < bytes.count else { return invalid() }
                    let byte = bytes[offset]
                    offset += 1
                    if byte == UInt8(ascii: ",") {
                        if top.isObject {
                            expectation = .name
                        } else {
                            frames[frames.count - 1].index += 1
                            expectation = .value
                        }
                    } else if byte == (top.isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                        frames.removeLast()
                        expectation = .separatorOrEnd
                    } else {
                        offset -= 1
                        return invalid()
                    }
                }
            }
        }

        private func invalid() -> Result<Int, Failure> {
            .failure(Failure(problem: .invalidSyntax, offset: offset))
        }

        private func path(ending name: String) -> [PathComponent] {
            var components: [PathComponent] = []
            for frame in frames.dropLast() {
                components.append(frame.isObject ? .member(frame.currentName) : .index(frame.index))
            }
            components.append(.member(name))
            return components
        }

        private mutating func skipWhitespace() {
            while offset < bytes.count {
                switch bytes[offset] {
                case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"): offset += 1
                default: return
                }
            }
        }

        private mutating func skipLiteral(_ literal: StaticString) -> Bool {
            let count = literal.utf8CodeUnitCount
            guard bytes.count - offset >= count else { return false }
            let matches = literal.withUTF8Buffer { expected in
                (0..<count).allSatisfy { bytes[offset + $0] == expected[$0] }
            }
            guard matches else { return false }
            offset += count
            return true
        }

        /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
        private mutating func skipNumber() -> Bool {
            if bytes[offset] == UInt8(ascii: "-") { offset += 1 }
            guard offset < bytes.count else { return false }
            if bytes[offset] == UInt8(ascii: "0") {
                offset += 1
            } else {
                guard skipDigits() else { return false }
            }
            if offset < bytes.count, bytes[offset] == UInt8(ascii: ".") {
                offset += 1
                guard skipDigits() else { return false }
            }
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "e") || bytes[offset] == UInt8(ascii: "E") {
                offset += 1
                if offset < bytes.count, bytes[offset] == UInt8(ascii: "+") || bytes[offset] == UInt8(ascii: "-") {
                    offset += 1
                }
                guard skipDigits() else { return false }
            }
            return true
        }

        /// One or more decimal digits.
        private mutating func skipDigits() -> Bool {
            let start = offset
            while offset < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[offset]) {
                offset += 1
            }
            return offset > start
        }

        /// Skips a string value starting at its opening quote. Its end is the first quote preceded by an even
        /// number of backslashes (in JSON a backslash always escapes the character after it).
        private mutating func skipString() -> Bool {
            guard let base = bytes.baseAddress else { return false }
            let contentStart = offset + 1
            var searchFrom = contentStart
            while searchFrom < bytes.count {
                guard let found = memchr(base + searchFrom, Int32(UInt8(ascii: "\"")), bytes.count - searchFrom)
                else { return false }
                let quote = base.distance(to: UnsafeRawPointer(found))
                var backslashes = 0
                while quote - backslashes - 1 >= contentStart,
                    bytes[quote - backslashes - 1] == UInt8(ascii: "\\")
                {
                    backslashes += 1
                }
                if backslashes % 2 == 0 {
                    offset = quote + 1
                    return true
                }
                searchFrom = quote + 1
            }
            return false
        }

        /// Reads a member name starting at its opening quote and returns it with its escapes decoded.
        private mutating func readName() -> String? {
            nameBuffer.removeAll(keepingCapacity: true)
            offset += 1
            while offset < bytes.count {
                let byte = bytes[offset]
                offset += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(decoding: nameBuffer, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard JSONEscape.decode(bytes, at: &offset, into: &nameBuffer, loneSurrogate: .replaced) else {
                        return nil
                    }
                case 0x00..<0x20:
                    return nil
                default:
                    nameBuffer.append(byte)
                }
            }
            return nil
        }
    }
}
