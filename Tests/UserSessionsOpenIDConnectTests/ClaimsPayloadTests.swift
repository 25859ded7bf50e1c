#if OpenIDConnect
import Foundation
import Testing

@testable import UserSessionsOpenIDConnect

/// The claims of a verified token are read in one pass by the package's reader: the same values `JSONDecoder` gives,
/// and a repeated claim refused.
struct ClaimsPayloadTests {
    @Test(arguments: [
        #"{"iss":"https://id.example","sub":"248289761001","aud":["app","other"],"exp":1800000000,"iat":1.8e9}"#,
        #"{"s":"caf\u00e9 \ud83d\ude00 \"q\" \\ \/","n":null,"t":true,"f":false,"neg":-0,"x":-12.5e-3,"big":9007199254740993}"#,
        #" { "o" : { "k" : [ 1 , [ "a" , { } ] , [ ] ] } , "e" : "" } "#,
        #"{}"#,
    ])
    func theReaderGivesWhatTheDecoderGives(json: String) throws {
        let read = try ClaimsPayload(json: Data(json.utf8)).values
        let decoded = try JSONDecoder().decode(ClaimsPayload.self, from: Data(json.utf8)).values
        #expect(read == decoded)
    }

    @Test(arguments: [
        #"{"sub":"alice","sub":"mallory"}"#, #"{"o":{"k":1,"k":2}}"#, #"["sub"]"#, #""sub""#, #"{"sub":"a"} x"#,
        #"{"sub":"a",}"#, #"{"n":01}"#, #"{"n":1e999}"#, #"{"s":"\x"}"#,
        String(repeating: #"{"a":"#, count: 130) + "1" + String(repeating: "}", count: 130),
    ])
    func whatIsNotOneObjectOfUniqueClaimsIsRefused(json: String) {
        #expect(throws: (any Error).self) { try ClaimsPayload(json: Data(json.utf8)) }
    }

    @Test func theCollectionsDecoderReadsClaimsItselfAndLeavesTheRestToFoundation() throws {
        let decoder = ClaimsJSONDecoder()
        #expect(throws: (any Error).self) {
            try decoder.decode(ClaimsPayload.self, from: Data(#"{"sub":"alice","sub":"mallory"}"#.utf8))
        }
        #expect(
            try decoder.decode(ClaimsPayload.self, from: Data(#"{"sub":"alice"}"#.utf8)).values == [
                "sub": .string("alice")
            ])
        struct Header: Decodable, Equatable { var alg: String }
        #expect(try decoder.decode(Header.self, from: Data(#"{"alg":"ES256"}"#.utf8)) == Header(alg: "ES256"))
    }
}
#endif
