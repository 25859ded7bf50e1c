import Foundation
import Testing

@testable import UserSessions

/// The hand-written JSON form of credentials (what sealing writes and reads) against the `Codable` conformance:
/// each reads what the other writes, and the reader refuses what the Foundation decoder behind `StrictJSON` refuses.
@Suite struct CredentialsJSONTests {
    private static func codableBytes(_ credentials: Credentials) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return try encoder.encode(credentials)
    }

    /// Strings with what JSON must escape, what it may escape, and characters beyond the BMP.
    private static let awkwardStrings = [
        "", "plain", "quote\"and\\backslash", "slash/and\u{7F}", "line\nfeed\r\ttab", "\u{0}\u{1}\u{1F}\u{8}\u{C}",
        "é中文", "emoji 👩‍💻 and 𝄞", "\u{2028}\u{2029}", "\u{FEFF}bom",
    ]

    private static func randomCredentials(_ random: inout SplitMix64) -> Credentials {
        func string() -> String {
            if Bool.random(using: &random) {
                return awkwardStrings[Int.random(in: 0..<awkwardStrings.count, using: &random)]
            }
            let scalars = (0..<Int.random(in: 0...40, using: &random)).map { _ in
                Unicode.Scalar(UInt32.random(in: 0...0xD7FF, using: &random)).map(Character.init) ?? "x"
            }
            return String(scalars)
        }
        func date() -> Date? {
            switch Int.random(in: 0...4, using: &random) {
            case 0: return nil
            case 1:
                return Date(
                    timeIntervalSinceReferenceDate: Double(Int.random(in: -1_000_000...2_000_000_000, using: &random)))
            case 2: return Date(timeIntervalSinceReferenceDate: Double.random(in: -1e9...1e10, using: &random))
            case 3: return Date(timeIntervalSinceReferenceDate: Double.random(in: -1e-3...1e-3, using: &random))
            default: return Date(timeIntervalSinceReferenceDate: Double.random(in: 1e15...1e300, using: &random))
            }
        }
        func permissions() -> Set<String> { Set((0..<Int.random(in: 0...4, using: &random)).map { _ in string() }) }
        return Credentials(
            accessToken: string(),
            refreshToken: Bool.random(using: &random) ? string() : nil,
            tokenType: Bool.random(using: &random) ? string() : nil,
            expiresAt: date(),
            lastRefreshedAt: date(),
            source: [.signIn, .refresh, .external, Credentials.Source(rawValue: string())][
                Int.random(in: 0..<4, using: &random)],
            grantedPermissions: permissions(),
            declinedPermissions: permissions(),
            idToken: Bool.random(using: &random) ? string() : nil,
            dpopKey: Bool.random(using: &random)
                ? DPoPKey(
                    algorithm: [.es256, .edDSA, .rs256][Int.random(in: 0..<3, using: &random)],
                    privateKey: (0..<Int.random(in: 1...64, using: &random)).map { _ in
                        UInt8.random(in: 0...255, using: &random)
                    })
                : nil
        )
    }

    @Test func eachSideReadsWhatTheOtherWrote() throws {
        var random = SplitMix64(seed: 0x5EA1_ED_C0DE)
        for _ in 0..<2_000 {
            let credentials = Self.randomCredentials(&random)
            let ours = try CredentialsJSON.encode(credentials)
            #expect(try CredentialsJSON.decode(ours) == credentials)
            #expect(try JSONDecoder().decode(Credentials.self, from: Data(ours)) == credentials)
            try StrictJSON.check(ours)
            #expect(try CredentialsJSON.decode(try Self.codableBytes(credentials)) == credentials)
        }
    }

    @Test func theBytesAreTheFoundationEncodersForPlainCredentials() throws {
        let credentials = Credentials(
            accessToken: "a/b\"c", refreshToken: "r", tokenType: "Bearer",
            expiresAt: Date(timeIntervalSinceReferenceDate: 800_000_000), lastRefreshedAt: nil, source: .refresh,
            grantedPermissions: ["b", "a"], declinedPermissions: [], idToken: nil)
        let foundation = String(decoding: try Self.codableBytes(credentials), as: UTF8.self)
        // Foundation escapes the slash; apart from that the two spellings are the same bytes.
        let ours = String(decoding: try CredentialsJSON.encode(credentials), as: UTF8.self)
        #expect(foundation.replacingOccurrences(of: "\\/", with: "/") == ours)
    }

    @Test func defaultsAreTheCodableOnes() throws {
        let minimal = try CredentialsJSON.decode(Array(#"{"access_token":"t"}"#.utf8))
        #expect(minimal == (try JSONDecoder().decode(Credentials.self, from: Data(#"{"access_token":"t"}"#.utf8))))
        #expect(minimal.source == .external && minimal.tokenType == nil && minimal.grantedPermissions.isEmpty)
        let nulls = #"{"access_token":"t","refresh_token":null,"expires_at":null,"source":null,"version":null}"#
        #expect(try CredentialsJSON.decode(Array(nulls.utf8)) == minimal)
        let unknown = #" { "later" : {"a":[1,2.5e-3,true,false,null,{"b":"\u00e9"}]}, "access_token" : "t" } "#
        #expect(try CredentialsJSON.decode(Array(unknown.utf8)) == minimal)
        let escapes = #"{"access_token":"\u0041\ud83d\ude00\/\b\f\n\r\t\"\\"}"#
        #expect(try CredentialsJSON.decode(Array(escapes.utf8)).accessToken == "A😀/\u{8}\u{C}\n\r\t\"\\")
    }

    @Test func aNewerVersionIsRefusedAsTheCodableConformanceRefusesIt() throws {
        let newer = Array(#"{"access_token":"t","version":3}"#.utf8)
        #expect(throws: UserSessionError.self) { try CredentialsJSON.decode(newer) }
        do {
            _ = try CredentialsJSON.decode(newer)
        } catch let error as UserSessionError {
            #expect(error.code == .unsupportedFormatVersion)
        }
        #expect(throws: UserSessionError.self) {
            try CredentialsJSON.decode(Array(#"{"access_token":"t","version":0}"#.utf8))
        }
    }

    @Test(arguments: [
        "", "{", "[]", "null", #"{"access_token":"t"} x"#, #"{"access_token":"t","access_token":"u"}"#,
        #"{"refresh_token":"r"}"#, #"{"access_token":null}"#, #"{"access_token":1}"#, #"{"access_token":"t",}"#,
        #"{"access_token":"a\u0"}"#, #"{"access_token":"\ud800"}"#, #"{"access_token":"\udc00"}"#,
        #"{"access_token":"\q"}"#, "{\"access_token\":\"tab\tinside\"}", #"{"access_token":"t","expires_at":"1"}"#,
        #"{"access_token":"t","expires_at":01}"#, #"{"access_token":"t","expires_at":1.}"#,
        #"{"access_token":"t","expires_at":-}"#, #"{"access_token":"t","expires_at":1e999}"#,
        #"{"access_token":"t","version":1.5}"#, #"{"access_token":"t","granted_permissions":["a",]}"#,
        #"{"access_token":"t","granted_permissions":"a"}"#, #"{"access_token":"t","x":tru}"#,
        #"{"access_token":"t","x":{"y":1,"y":2}}"#,
    ])
    func malformedDocumentsAreRefused(_ document: String) {
        #expect(throws: (any Error).self) { try CredentialsJSON.decode(Array(document.utf8)) }
    }

    @Test func invalidUTF8AndDeepNestingAreRefused() {
        var invalid = Array(#"{"access_token":""#.utf8)
        invalid += [0xC3, 0x28] + Array(#""}"#.utf8)
        #expect(throws: CredentialsJSON.Failure.self) { try CredentialsJSON.decode(invalid) }
        let deep =
            #"{"access_token":"t","x":"# + String(repeating: "[", count: 200) + String(repeating: "]", count: 200) + "}"
        #expect(throws: CredentialsJSON.Failure.self) { try CredentialsJSON.decode(Array(deep.utf8)) }
        let fine =
            #"{"access_token":"t","x":"# + String(repeating: "[", count: 100) + String(repeating: "]", count: 100) + "}"
        #expect((try? CredentialsJSON.decode(Array(fine.utf8))) != nil)
    }

    @Test func aFailureNamesAnOffsetNeverTheDocument() {
        let secret = "secret-token-value"
        do {
            _ = try CredentialsJSON.decode(Array(#"{"access_token":"\#(secret)""#.utf8))
            Issue.record("an unterminated document was read")
        } catch {
            #expect(!"\(error)".contains(secret))
            #expect(!String(reflecting: error).contains(secret))
        }
    }

    @Test func aDateThatIsNotFiniteIsAnError() {
        let credentials = Credentials(accessToken: "t", expiresAt: Date(timeIntervalSinceReferenceDate: .infinity))
        #expect(throws: UserSessionError.self) { try CredentialsJSON.encode(credentials) }
    }
}
