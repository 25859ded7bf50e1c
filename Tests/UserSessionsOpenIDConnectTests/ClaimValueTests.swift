#if OpenIDConnect
import Foundation
import Testing
import UserSessionsOpenIDConnect

/// `ClaimValue` is read and written through the core's parsed JSON value.
struct ClaimValueTests {
    @Test func everyJSONValueRoundTrips() throws {
        let json = Data(#"{"s":"x","i":1700000000,"f":1.5,"b":true,"n":null,"a":[false,"y",2],"o":{"k":"v"}}"#.utf8)
        let values = try JSONDecoder().decode([String: ClaimValue].self, from: json)
        #expect(
            values == [
                "s": .string("x"), "i": .number(1_700_000_000), "f": .number(1.5), "b": .bool(true), "n": .null,
                "a": .array([.bool(false), .string("y"), .number(2)]), "o": .object(["k": .string("v")]),
            ])
        #expect(values["b"] != .number(1), "a boolean is never a number")
        let again = try JSONDecoder().decode([String: ClaimValue].self, from: try JSONEncoder().encode(values))
        #expect(again == values)
        #expect(OpenIDClaims(values).date("i") == Date(timeIntervalSince1970: 1_700_000_000))
    }
}
#endif
