import Foundation
import Testing

@testable import UserSessions

/// The strict pre-scan every parser of untrusted JSON runs before decoding: duplicate members, depth, syntax.
struct StrictJSONScanTests {
    static func problem(_ text: String) -> StrictJSONScan.Failure.Problem? {
        do {
            try StrictJSONScan.check(Data(text.utf8))
            return nil
        } catch {
            return error.problem
        }
    }

    /// The total number of object members, as the decoder sees them.
    static func memberCount(_ value: ParsedJSON) -> Int {
        switch value {
        case .array(let elements): elements.reduce(0) { $0 + memberCount($1) }
        case .object(let members): members.count + members.values.reduce(0) { $0 + memberCount($1) }
        default: 0
        }
    }

    static let valid = [
        #"{}"#, #"[]"#, #"0"#, #"-0.5e+10"#, #""text""#, #"true"#, #"null"#, " \t\r\n{ } \n",
        #"{"a": 1, "b": [1, 2, {"a": 2}], "c": {"a": {"a": null}}}"#,
        #"{"a": "quote \" inside", "a\"": "backslash \\", "a\\": "\\\\\""}"#,
        #"{"\u00e9": 1, "e\u0300": 2, "\ud83d\ude00": 3, "/": 4, "\/x": 5}"#,
        #"[{"id": 1}, {"id": 2}, {"id": 3}]"#,
        "\u{FEFF}{\"bom\": true}",
    ]

    @Test func validDocumentsPassAndTheirMembersAreCountedAsTheDecoderCountsThem() throws {
        for text in Self.valid {
            #expect(Self.problem(text) == nil, "\(text)")
            let members = try StrictJSONScan.check(Data(text.utf8))
            let parsed = try ParsedJSON(parsing: Data(text.utf8))
            #expect(members == Self.memberCount(parsed), "\(text)")
        }
        #expect(try StrictJSONScan.check("{\"a\": {\"b\": 1}, \"c\": [{\"d\": 2}]}") == 4)
        #expect(try StrictJSONScan.check(Array(#"{"x": 1}"#.utf8)) == 1)
    }

    @Test func duplicatesAreFoundHoweverTheyAreSpelled() {
        let duplicates = [
            #"{"id": "u", "id": 1.5}"#,
            #"{"id": "u", "\u0069d": 1}"#,  // an escape of the same name
            #"{"\u0069\u0064": 1, "id": 2}"#,
            #"{"caf\u00e9": 1, "cafe\u0301": 2}"#,  // canonically equivalent: equal Swift strings
            "{\"caf\u{E9}\": 1, \"cafe\u{301}\": 2}",  // the same, as raw UTF-8
            #"{"\u212a": 1, "K": 2}"#,  // the Kelvin sign decomposes to K
            #"{"a": {"b": [1, {"c": 1, "c": 2}]}}"#,
            #"[{"ok": 1}, {"x": 1, "y": 2, "x": 3}]"#,
            #"{"a": 1, "b": 2, "c": 3, "a": 4}"#,
            #"{"\ud800": 1, "\udfff": 2}"#,  // lone surrogates both read as U+FFFD
        ]
        for text in duplicates {
            #expect(Self.problem(text) == .duplicateMember, "\(text)")
        }
        // Names only need to differ within one object.
        #expect(Self.problem(#"{"a": {"a": {"a": 1}}, "b": {"a": 1}}"#) == nil)
        #expect(Self.problem(#"{"Id": 1, "id": 2, "ID": 3}"#) == nil)
    }

    @Test func theDuplicatesPathLeadsToIt() throws {
        let text = #"{"result": {"user": [{"id": 1}, {"id": 2, "name": "n", "id": 3}]}}"#
        do {
            try StrictJSONScan.check(Data(text.utf8))
            Issue.record("no failure")
        } catch {
            #expect(error.path == [.member("result"), .member("user"), .index(1), .member("id")])
            #expect(StrictJSONScan.path(error.path, ifEveryNameIsIn: ["result", "user", "id"]) == "result.user[1].id")
            #expect(StrictJSONScan.path(error.path, ifEveryNameIsIn: ["result", "id"]) == nil)
            #expect(Array(text.utf8)[error.offset] == UInt8(ascii: "\""))
        }
    }

    @Test func nestingIsBoundedWithoutRecursion() {
        let limit = StrictJSONScan.maximumDepth
        #expect(Self.problem(String(repeating: "[", count: limit) + String(repeating: "]", count: limit)) == nil)
        #expect(
            Self.problem(String(repeating: "[", count: limit + 1) + String(repeating: "]", count: limit + 1))
                == .tooDeep)
        #expect(
            Self.problem(String(repeating: "{\"a\":", count: limit) + "1" + String(repeating: "}", count: limit))
                == nil)
        #expect(
            Self.problem(
                String(repeating: "{\"a\":", count: limit + 1) + "1" + String(repeating: "}", count: limit + 1))
                == .tooDeep)
        #expect(Self.problem(String(repeating: "[", count: 1_000_000)) == .tooDeep)
    }

    @Test func anythingButJSONIsInvalidSyntax() {
        let invalid = [
            "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{\"a\":}", "{a:1}", "01", "1.", ".5", "-", "1e",
            "+1", "NaN", "Infinity", "tru", "nul", "[1 2]", "{} {}", "\"unterminated", "\"a\\\"", "{\"a\":1]",
            "[1}", "{\"a\u{0}\":1}", "{\"\\x\":1}", "{\"\\u12\":1}", "// comment\n{}", "{\"a\":1}//", "\u{0}",
            "<html></html>", "\u{FEFF}",
        ]
        for text in invalid {
            #expect(Self.problem(text) == .invalidSyntax, "\(text.debugDescription)")
        }
        #expect(Self.problem("[\"tail\\\\\"]") == nil)  // an escaped backslash does not escape the quote
    }

    @Test func aFiftyMegabyteStringIsScannedAndAnUnterminatedOneRefused() throws {
        var closed = Data("{\"a\": \"".utf8)
        closed.append(Data(repeating: UInt8(ascii: "x"), count: 50 * 1024 * 1024))
        closed.append(Data("\"}".utf8))
        #expect(try StrictJSONScan.check(closed) == 1)
        closed.removeLast(2)
        #expect(throws: StrictJSONScan.Failure.self) { try StrictJSONScan.check(closed) }
    }

    @Test func failuresNeverShowNamesFromTheDocument() {
        do {
            try StrictJSONScan.check(#"{"rt-SECRET": 1, "rt-SECRET": 2}"#)
            Issue.record("no failure")
        } catch {
            #expect(!"\(error)".contains("SECRET"))
            #expect(error.problem == .duplicateMember)
        }
    }
}
