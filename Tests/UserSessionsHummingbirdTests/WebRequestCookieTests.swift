#if Hummingbird
import HTTPTypes
import Testing
import UserSessionsHummingbird

@testable import UserSessionsWeb

/// The `Cookie` header as the layer reads it: the first pair of the name, across fields, scanned in place.
@Suite struct WebRequestCookieTests {
    func request(_ fields: [String]) -> WebRequest {
        var headers = HTTPFields()
        for field in fields { headers.append(HTTPField(name: .cookie, value: field)) }
        return WebRequest(method: .get, path: "/", query: nil, headers: headers) { _ in [] }
    }

    @Test(arguments: [
        (["user_session=abc"], "abc"),
        (["a=1; user_session=abc; b=2"], "abc"),
        (["a=1;user_session=abc"], "abc"),
        (["a=1;   user_session=abc"], "abc"),
        (["user_session="], ""),
        (["user_session=a=b"], "a=b"),
        ([";;user_session=abc;"], "abc"),
        (["user_session=first; user_session=second"], "first"),
        (["a=1", "user_session=abc"], "abc"),
        (["user_session=first", "user_session=second"], "first"),
    ])
    func theSessionCookieIsFound(fields: [String], value: String) {
        #expect(request(fields).cookie("user_session") == value)
    }

    @Test(arguments: [
        [String](), ["a=1"], ["user_session"], ["xuser_session=abc"], ["user_sessionx=abc"], ["user_session x=abc"],
        ["a=user_session=abc"], [""], [";"],
    ])
    func noOtherPairIsTakenForIt(fields: [String]) {
        #expect(request(fields).cookie("user_session") == nil)
    }
}
#endif
