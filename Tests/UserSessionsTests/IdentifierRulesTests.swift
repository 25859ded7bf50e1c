import Foundation
import Testing

@testable import UserSessions

/// The identifier module's rules, and the one hex-escape encoder that both form encoding and file-safe names use.
struct IdentifierRulesTests {
    @Test func eachLayerPassesItsOwnLengthLimit() {
        let session = String(repeating: "a", count: IdentifierRules.maximumSessionLength)
        let longer = session + "a"
        #expect(IdentifierRules.sessionProblem(with: session) == nil)
        #expect(IdentifierRules.sessionProblem(with: longer) == "is 1025 bytes long; the limit is 1024")
        // What a controller refuses, a store still keeps (up to its own limit).
        #expect(throws: Never.self) { try IdentifierRules.validateForStore(longer) }
        #expect(throws: UserSessionError(.invalidIdentifier, "")) {
            try IdentifierRules.validateForStore(longer, maximumLength: 1024)
        }
        #expect(IdentifierRules.problem(with: "", maximumLength: 10) == "is empty")
        #expect(IdentifierRules.problem(with: "a\u{0}b", maximumLength: 10) == "contains NUL")
        // The limit counts UTF-8 bytes, not characters: "é" is two bytes.
        #expect(IdentifierRules.problem(with: "é", maximumLength: 1) != nil)
    }

    @Test(arguments: ["current", "current-identifier", "a_b", String(repeating: "k", count: 200)])
    func reservedNamesThatCannotEqualAnEncodedIdentifierAreAccepted(_ name: String) {
        #expect(IdentifierRules.problem(withReservedName: name, maximumLength: 200) == nil)
    }

    @Test(arguments: ["", "u-alice", "h-0123", "Current", "a.b", "a/b", String(repeating: "k", count: 201)])
    func reservedNamesThatCouldCollideOrAreUnsafeAreRefused(_ name: String) {
        #expect(IdentifierRules.problem(withReservedName: name, maximumLength: 200) != nil)
    }

    @Test func theRemoteStoreRefusesAnUnsafeCurrentIdentifierKey() throws {
        let endpoint = try #require(URL(string: "https://tokens.example.com/cache"))
        #expect(throws: UserSessionError(.invalidIdentifier, "")) {
            try RemoteTokenStore(endpoint: endpoint, configuration: .init(currentIdentifierKey: "u-alice"))
        }
    }

    @Test func oneEncoderServesPercentEncodingAndFileSafeNames() {
        #expect(FormURLEncoding.percentEncode("a b+c/é~") == "a%20b%2Bc%2F%C3%A9~")
        let lowercase = HexEscaping(escape: UInt8(ascii: "_"), uppercase: false) { $0 == UInt8(ascii: "a") }
        #expect(lowercase.encode("aé/") == "a_c3_a9_2f")
        #expect(lowercase.value(ofDigit: UInt8(ascii: "f")) == 15)
        #expect(lowercase.value(ofDigit: UInt8(ascii: "F")) == nil)
        // Stopping at a limit tells the caller that the output would have been longer.
        var output: [UInt8] = []
        #expect(!lowercase.append("éé".utf8, to: &output, limit: 4))
        #expect(lowercase.append("a".utf8, to: &output, limit: 100))
        // A digest as lowercase digits, every byte two of them (web-session keys, state-store file names).
        #expect(HexEscaping.lowercaseDigits(of: [0x00, 0x0F, 0xA5, 0xFF, 0x10]) == "000fa5ff10")
        #expect(HexEscaping.lowercaseDigits(of: []).isEmpty)
    }
}
