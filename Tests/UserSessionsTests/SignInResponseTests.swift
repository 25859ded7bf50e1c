import Foundation
import Testing

@testable import UserSessions

struct SignInResponseTests {
    static let receivedAt = Date(timeIntervalSince1970: 1_700_000_000)

    private func parse(_ json: String) throws -> UserSessionPrototype {
        try UserSessionPrototype(signInResponse: Data(json.utf8), receivedAt: Self.receivedAt)
    }

    @Test func parsesTheDocumentedUserShape() throws {
        let prototype = try parse(
            #"{"result": {"user": {"id": "ee977806d72865", "email": "foo@bar.com", "name": "Foo Bar"}}}"#
        )
        #expect(prototype.identifier == "ee977806d72865")
        #expect(prototype.userInfo == UserInfo(id: "ee977806d72865", email: "foo@bar.com", name: "Foo Bar"))
        #expect(prototype.credentials == nil)
    }

    @Test func convertsAnIntegerIdToItsDecimalForm() throws {
        let prototype = try parse(#"{"result": {"user": {"id": -42}}}"#)
        #expect(prototype.identifier == "-42")
        #expect(prototype.userInfo.email == nil)
        #expect(prototype.userInfo.name == nil)
    }

    @Test func keepsOtherStringUserMembersAsAttributesAndTreatsNullAsAbsent() throws {
        let prototype = try parse(
            #"{"result": {"user": {"id": "u", "email": null, "picture": "p.png", "age": 3, "name": "N"}}}"#
        )
        #expect(prototype.userInfo.email == nil)
        #expect(prototype.userInfo.name == "N")
        #expect(prototype.userInfo.attributes == ["picture": "p.png"])
    }

    @Test func readsTokenFieldsWithExpiryFromReceivedAt() throws {
        let prototype = try parse(
            """
            {"result": {"user": {"id": "u1"}, "access_token": "at", "refresh_token": "rt", "expires_in": 3600,
             "scope": "email  profile\\topenid", "token_type": "bearer", "declined_scope": "photos",
             "declined_permissions": ["friends"]}}
            """
        )
        let credentials = try #require(prototype.credentials)
        #expect(credentials.accessToken == "at")
        #expect(credentials.refreshToken == "rt")
        #expect(credentials.tokenType == "bearer")
        #expect(credentials.expiresAt == Self.receivedAt.addingTimeInterval(3600))
        #expect(credentials.lastRefreshedAt == Self.receivedAt)
        #expect(credentials.source == .signIn)
        #expect(credentials.grantedPermissions == ["email", "profile", "openid"])
        #expect(credentials.declinedPermissions == ["photos", "friends"])
    }

    struct Location: Sendable, CustomTestStringConvertible {
        var json: String
        var expectedToken: String?
        var testDescription: String { expectedToken ?? "none" }
    }

    @Test(arguments: [
        Location(
            json: #"{"result": {"user": {"id": "u"}, "token": {"access_token": "nested"}}}"#, expectedToken: "nested"),
        Location(
            json: #"{"result": {"user": {"id": "u"}, "credentials": {"access_token": "creds"}}}"#,
            expectedToken: "creds"
        ),
        Location(json: #"{"result": {"user": {"id": "u"}, "access_token": "inResult"}}"#, expectedToken: "inResult"),
        Location(json: #"{"access_token": "top", "result": {"user": {"id": "u"}}}"#, expectedToken: "top"),
        Location(
            json: #"{"access_token": "top", "result": {"user": {"id": "u"}, "token": {"access_token": "first"}}}"#,
            expectedToken: "first"
        ),
        Location(
            json: #"{"result": {"user": {"id": "u"}, "token": null, "access_token": "inResult"}}"#,
            expectedToken: "inResult"
        ),
        Location(json: #"{"result": {"user": {"id": "u"}, "access_token": null}}"#, expectedToken: nil),
        Location(json: #"{"result": {"user": {"id": "u"}, "refresh_token": "orphan"}}"#, expectedToken: nil),
    ])
    func findsTokenFieldsInTheDocumentedPlaces(_ location: Location) throws {
        let prototype = try parse(location.json)
        #expect(prototype.credentials?.accessToken == location.expectedToken)
    }

    @Test func defaultsTokenTypeAndLeavesExpiryOpenWhenAbsent() throws {
        let credentials = try #require(
            try parse(#"{"result": {"user": {"id": "u"}, "access_token": "a", "refresh_token": ""}}"#).credentials
        )
        #expect(credentials.tokenType == "Bearer")
        #expect(credentials.expiresAt == nil)
        #expect(credentials.refreshToken == nil)
        #expect(credentials.grantedPermissions.isEmpty)
    }

    @Test(arguments: [
        ("\"120\"", 120.0), ("\"1.5\"", 1.5), ("0", 0), ("2.25", 2.25), ("315576000", 315_576_000),
    ])
    func acceptsNumericExpiresIn(_ literal: String, _ seconds: Double) throws {
        let prototype = try parse(#"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": \#(literal)}}"#)
        #expect(prototype.credentials?.expiresAt == Self.receivedAt.addingTimeInterval(seconds))
    }

    struct Failure: Sendable, CustomTestStringConvertible {
        var name: String
        var json: String
        var path: String?
        var testDescription: String { name }
    }

    static let failures: [Failure] = [
        Failure(name: "invalid JSON", json: #"{"result": "#, path: nil),
        Failure(name: "empty body", json: "", path: nil),
        Failure(name: "array top level", json: "[1, 2]", path: nil),
        Failure(name: "string top level", json: #""result""#, path: nil),
        Failure(name: "number out of range", json: #"{"result": 1e400}"#, path: nil),
        Failure(name: "lone surrogate", json: #"{"result": "\ud800"}"#, path: nil),
        Failure(name: "missing result", json: #"{"user": {"id": "u"}}"#, path: "result"),
        Failure(name: "result is a string", json: #"{"result": "ok"}"#, path: "result"),
        Failure(name: "result is null", json: #"{"result": null}"#, path: "result"),
        Failure(name: "missing user", json: #"{"result": {}}"#, path: "result.user"),
        Failure(name: "user is an array", json: #"{"result": {"user": []}}"#, path: "result.user"),
        Failure(name: "missing id", json: #"{"result": {"user": {"email": "e"}}}"#, path: "result.user.id"),
        Failure(name: "id is null", json: #"{"result": {"user": {"id": null}}}"#, path: "result.user.id"),
        Failure(name: "id is a boolean", json: #"{"result": {"user": {"id": true}}}"#, path: "result.user.id"),
        Failure(name: "id is a fraction", json: #"{"result": {"user": {"id": 1.5}}}"#, path: "result.user.id"),
        Failure(
            name: "id beyond Int64",
            json: #"{"result": {"user": {"id": 123456789012345678901}}}"#,
            path: "result.user.id"
        ),
        Failure(name: "id is an object", json: #"{"result": {"user": {"id": {}}}}"#, path: "result.user.id"),
        Failure(name: "empty id", json: #"{"result": {"user": {"id": ""}}}"#, path: "result.user.id"),
        Failure(name: "id with NUL", json: #"{"result": {"user": {"id": "a\u0000b"}}}"#, path: "result.user.id"),
        Failure(
            name: "email is a number", json: #"{"result": {"user": {"id": "u", "email": 5}}}"#,
            path: "result.user.email"),
        Failure(
            name: "name is an array", json: #"{"result": {"user": {"id": "u", "name": []}}}"#, path: "result.user.name"),
        Failure(
            name: "access token is a number",
            json: #"{"result": {"user": {"id": "u"}, "access_token": 7}}"#,
            path: "result.access_token"
        ),
        Failure(
            name: "access token is empty",
            json: #"{"access_token": "", "result": {"user": {"id": "u"}}}"#,
            path: "access_token"
        ),
        Failure(
            name: "token is not an object",
            json: #"{"result": {"user": {"id": "u"}, "token": "abc"}}"#,
            path: "result.token"
        ),
        Failure(
            name: "credentials is not an object",
            json: #"{"result": {"user": {"id": "u"}, "credentials": 1}}"#,
            path: "result.credentials"
        ),
        Failure(
            name: "refresh token is a boolean",
            json: #"{"result": {"user": {"id": "u"}, "token": {"access_token": "a", "refresh_token": false}}}"#,
            path: "result.token.refresh_token"
        ),
        Failure(
            name: "token type is a number",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "token_type": 1}}"#,
            path: "result.token_type"
        ),
        Failure(
            name: "negative expiry",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": -1}}"#,
            path: "result.expires_in"
        ),
        Failure(
            name: "negative expiry string",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": "-5"}}"#,
            path: "result.expires_in"
        ),
        Failure(
            name: "NaN expiry string",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": "nan"}}"#,
            path: "result.expires_in"
        ),
        Failure(
            name: "infinite expiry string",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": "inf"}}"#,
            path: "result.expires_in"
        ),
        Failure(
            name: "hex expiry string",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": "0x10"}}"#,
            path: "result.expires_in"
        ),
        Failure(
            name: "empty expiry string",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": ""}}"#,
            path: "result.expires_in"
        ),
        Failure(
            name: "absurd expiry",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": 315576001}}"#,
            path: "result.expires_in"
        ),
        Failure(
            name: "huge expiry",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": 1e300}}"#,
            path: "result.expires_in"
        ),
        Failure(
            name: "expiry is a boolean",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": true}}"#,
            path: "result.expires_in"
        ),
        Failure(
            name: "scope is a number",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "scope": 3}}"#,
            path: "result.scope"
        ),
        Failure(
            name: "scope array with a number",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "scope": ["a", 1]}}"#,
            path: "result.scope[1]"
        ),
        Failure(
            name: "declined scope is an object",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "declined_scope": {}}}"#,
            path: "result.declined_scope"
        ),
        Failure(
            name: "declined permissions is a boolean",
            json: #"{"result": {"user": {"id": "u"}, "access_token": "a", "declined_permissions": false}}"#,
            path: "result.declined_permissions"
        ),
    ]

    @Test(arguments: failures)
    func rejectsMalformedResponsesNamingTheField(_ failure: Failure) {
        let error = #expect(throws: UserSessionError.self) { try parse(failure.json) }
        #expect(error?.code == .malformedSignInResponse)
        #expect(error?.jsonPath == failure.path)
    }

    @Test func errorsNeverContainFieldValues() {
        let json = #"{"result": {"user": {"id": "u"}, "access_token": "a", "refresh_token": ["secret-refresh"]}}"#
        let error = #expect(throws: UserSessionError.self) { try parse(json) }
        #expect(error.map { !"\($0)".contains("secret") } == true)
        #expect(error?.jsonPath == "result.refresh_token")
    }

    struct Nesting: Sendable, CustomTestStringConvertible {
        var name: String
        var json: String
        var testDescription: String { name }
    }

    @Test(arguments: [
        Nesting(name: "arrays", json: String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)),
        Nesting(
            name: "objects",
            json: String(repeating: #"{"a":"#, count: 100_000) + "1" + String(repeating: "}", count: 100_000)
        ),
        Nesting(name: "unterminated", json: #"{"result": {"user": "# + String(repeating: "[", count: 100_000)),
    ])
    func rejectsDeepNestingWithATypedError(_ nesting: Nesting) {
        let error = #expect(throws: UserSessionError.self) { try parse(nesting.json) }
        #expect(error?.code == .malformedSignInResponse)
    }

    @Test func survivesArbitraryBytes() {
        // A fixed pseudo-random sequence (no flakiness) of byte soups and mutated valid documents.
        var generator = SplitMix64(seed: 0x5EED)
        let valid = Array(
            #"{"result": {"user": {"id": 7, "email": "e"}, "token": {"access_token": "a", "expires_in": "60"}}}"#.utf8
        )
        for round in 0..<2_000 {
            var bytes = valid
            if round.isMultiple(of: 2) {
                bytes = (0..<Int(generator.next() % 64)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            } else {
                for _ in 0..<3 {
                    let index = Int(generator.next() % UInt64(bytes.count))
                    bytes[index] = UInt8(truncatingIfNeeded: generator.next())
                }
            }
            do {
                _ = try UserSessionPrototype(signInResponse: Data(bytes), receivedAt: Self.receivedAt)
            } catch let error as UserSessionError {
                #expect(error.code == .malformedSignInResponse)
            } catch {
                Issue.record("untyped error \(error)")
            }
        }
    }
}
