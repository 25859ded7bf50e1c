#if OpenIDConnect
import Foundation
import Testing

@testable import UserSessionsOpenIDConnect

/// The JOSE header of a token from the provider: `alg` and `kid` read with the package's small JSON reader, and
/// anything that is not one JSON object refused as a malformed token.
struct JOSEHeaderTests {
    private static func token(header: String) -> String {
        let encoded = Data(header.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        return encoded + ".eyJzdWIiOiJ4In0.AAAA"
    }

    @Test func algAndKidAreReadAndOtherMembersSkipped() throws {
        let header = try ProviderKeySet.header(
            of: Self.token(header: #"{"typ":"JWT","x5c":["a",{"b":[1,2.5,null]}],"alg":"ES256","kid":"k\u00e9"}"#),
            what: "the ID token")
        #expect(header.algorithm == "ES256")
        #expect(header.keyID == "ké")
        let bare = try ProviderKeySet.header(of: Self.token(header: #" { "alg" : "RS256" } "#), what: "the ID token")
        #expect(bare.algorithm == "RS256" && bare.keyID == nil)
        // A kid that is not a string names no key: every key of the algorithm is tried, as before.
        let numeric = try ProviderKeySet.header(of: Self.token(header: #"{"alg":"RS256","kid":7}"#), what: "x")
        #expect(numeric.algorithm == "RS256" && numeric.keyID == nil)
    }

    @Test(arguments: [
        #"["alg","RS256"]"#, #"{"alg":"RS256","alg":"none"}"#, #"{"alg":"RS256"} {}"#, #"{"alg":"RS256""#,
        #"{"alg":"RS256","x":{"y":1,"y":2}}"#, "not json",
    ])
    func aHeaderThatIsNotOneJSONObjectIsAMalformedToken(_ header: String) {
        do {
            _ = try ProviderKeySet.header(of: Self.token(header: header), what: "the ID token")
            Issue.record("the header \(header) was read")
        } catch {
            #expect(error.code == .malformedToken)
        }
    }
}
#endif
