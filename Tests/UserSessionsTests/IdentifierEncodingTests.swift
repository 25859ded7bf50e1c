import Foundation
import Testing

@testable import UserSessions

struct IdentifierEncodingTests {
    static let identifiers: [String] = [
        "ee977806d72865", "Foo.Bar@example.com", "..", ".", "../../etc/passwd", "a/b", "/", "_5f", "u-x", "h-x",
        "-", "e\u{301}", "é", "\u{2024}\u{2024}/etc", "\u{2215}etc\u{2215}passwd", "ｆｏｏ", "🙂", " ", "\t\n",
        String(repeating: "a", count: 200), String(repeating: "A", count: 66),
    ]

    @Test(arguments: identifiers)
    func namesUseOnlySafeCharactersAndDecodeBack(_ identifier: String) throws {
        let name = try IdentifierEncoding.name(for: identifier)
        #expect(!name.isHashed)
        #expect(name.value.hasPrefix("u-"))
        #expect(name.value.utf8.allSatisfy { Self.isSafe($0) })
        #expect(name.value.utf8.count <= IdentifierEncoding.maximumEncodedLength + 2)
        let decoded = try #require(IdentifierEncoding.identifier(fromName: name.value))
        #expect(Array(decoded.utf8) == Array(identifier.utf8))
    }

    @Test func distinctIdentifiersGetDistinctNames() throws {
        let names = try Self.identifiers.map { try IdentifierEncoding.name(for: $0).value }
        #expect(Set(names).count == names.count)
        // Canonically equivalent strings are different byte sequences and so different keys on disk.
        #expect(try IdentifierEncoding.name(for: "e\u{301}") != IdentifierEncoding.name(for: "é"))
        #expect(try IdentifierEncoding.name(for: "A").value == "u-_41")
        #expect(try IdentifierEncoding.name(for: "..").value == "u-_2e_2e")
    }

    @Test(arguments: [("x", 201), ("/", 67), ("x", 10_240)])
    func longIdentifiersGetAStableHashedName(_ character: String, _ count: Int) throws {
        let identifier = String(repeating: character, count: count)
        let name = try IdentifierEncoding.name(for: identifier)
        #expect(name.isHashed)
        #expect(name.value == "h-" + StableHash128(identifier).hexDigits)
        #expect(name.value.utf8.count == 34)
        #expect(name.value.utf8.allSatisfy { Self.isSafe($0) })
        #expect(IdentifierEncoding.identifier(fromName: name.value) == nil)
    }

    @Test func hashMatchesTheFNV1a128ReferenceValues() {
        #expect(StableHash128("").hexDigits == "6c62272e07bb014262b821756295c58d")
        #expect(StableHash128("a").hexDigits == "d228cb696f1a8caf78912b704e4a8964")
        #expect(StableHash128("foobar").hexDigits == "343e1662793c64bf6f0d3597ba446f18")
        #expect(StableHash128(String(repeating: "x", count: 300)).hexDigits == "0ca87c95ae2960615decdb050f1a92bd")
    }

    @Test func hash64MatchesTheFNV1a64ReferenceValues() {
        #expect(StableHash64("").hexDigits == "cbf29ce484222325")
        #expect(StableHash64("a").hexDigits == "af63dc4c8601ec8c")
        #expect(StableHash64("foobar").hexDigits == "85944171f73967e8")
        // The PostgreSQL store's lease key is this sequence: a fleet's processes must all derive the same key.
        var lease = StableHash64("user-sessions.lease")
        lease.combine(0)
        lease.combine("tenant")
        lease.combine(0)
        lease.combine("alice")
        #expect(lease.value == 0x3881_ca39_5e87_bf2c)
    }

    @Test(arguments: ["", "a\u{0}b", "\u{0}", String(repeating: "a", count: 64 * 1024 + 1)])
    func rejectsUnusableIdentifiers(_ identifier: String) {
        let error = #expect(throws: UserSessionError.self) { try IdentifierEncoding.name(for: identifier) }
        #expect(error?.code == .invalidIdentifier)
    }

    @Test func acceptsAnIdentifierOfExactlyTheLimit() throws {
        let name = try IdentifierEncoding.name(for: String(repeating: "a", count: 64 * 1024))
        #expect(name.isHashed)
    }

    @Test(arguments: ["", "u-", "x-abc", "u-A", "u-_4", "u-_zz", "u-_61", "u-_00", "u-_ff", "u-.", "h-abc"])
    func rejectsNamesItDidNotMake(_ name: String) {
        #expect(IdentifierEncoding.identifier(fromName: name) == nil)
    }

    static func isSafe(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
            || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
    }
}
