import Foundation
import Testing

@testable import UserSessions

/// `Credentials` and `UserInfo` keep their fields in one object every copy shares: they must still behave as plain
/// values (a change to one copy is never seen by another), compare and hash by their fields, encode as before, and
/// show their fields (never a token) in dumps.
@Suite struct SharedFieldsTests {
    private static let credentials = Credentials(
        accessToken: "access-a", refreshToken: "refresh-a", expiresAt: Date(timeIntervalSinceReferenceDate: 1_000),
        grantedPermissions: ["read"], idToken: "id-a")

    @Test func aChangeToOneCopyOfCredentialsIsNeverSeenByAnother() {
        let original = Self.credentials
        var copy = original
        copy.accessToken = "access-b"
        copy.refreshToken = nil
        copy.grantedPermissions.insert("write")
        #expect(original.accessToken == "access-a")
        #expect(original.refreshToken == "refresh-a")
        #expect(original.grantedPermissions == ["read"])
        #expect(copy.accessToken == "access-b")
        #expect(copy.refreshToken == nil)
        #expect(copy.grantedPermissions == ["read", "write"])
        #expect(copy != original)
    }

    @Test func credentialsMadeApartWithTheSameFieldsAreEqualAndHashAlike() throws {
        let twin = Credentials(
            accessToken: "access-a", refreshToken: "refresh-a",
            expiresAt: Date(timeIntervalSinceReferenceDate: 1_000), grantedPermissions: ["read"], idToken: "id-a")
        #expect(twin == Self.credentials)
        #expect(twin.hashValue == Self.credentials.hashValue)
        #expect(Set([twin, Self.credentials]).count == 1)
        var other = twin
        other.idToken = "id-b"
        #expect(other != Self.credentials)
        let decoded = try JSONDecoder().decode(Credentials.self, from: JSONEncoder().encode(Self.credentials))
        #expect(decoded == Self.credentials)
    }

    @Test func aDumpOfCredentialsShowsTheirFieldsAndNoToken() {
        var dumped = ""
        dump(Self.credentials, to: &dumped)
        #expect(dumped.contains("grantedPermissions"))
        #expect(!dumped.contains("access-a") && !dumped.contains("refresh-a") && !dumped.contains("id-a"))
        #expect(!dumped.contains("Box"))
    }

    @Test func userInfoIsAPlainValueThatEncodesAsBefore() throws {
        let original = UserInfo(id: "alice", email: "alice@example.com", attributes: ["team": "blue"])
        var copy = original
        copy.name = "Alice"
        copy.attributes["team"] = "red"
        #expect(original.name == nil && original.attributes == ["team": "blue"])
        #expect(copy.name == "Alice" && copy.attributes == ["team": "red"])
        #expect(UserInfo(id: "alice", email: "alice@example.com", attributes: ["team": "blue"]) == original)
        #expect(
            Set([original, UserInfo(id: "alice", email: "alice@example.com", attributes: ["team": "blue"])]).count == 1)

        // The keys the synthesized conformance used: `id` and `attributes` required, the others optional.
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let json = String(decoding: try encoder.encode(original), as: UTF8.self)
        #expect(json == #"{"attributes":{"team":"blue"},"email":"alice@example.com","id":"alice"}"#)
        #expect(try JSONDecoder().decode(UserInfo.self, from: Data(json.utf8)) == original)
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(UserInfo.self, from: Data(#"{"id":"alice"}"#.utf8))
        }

        var dumped = ""
        dump(copy, to: &dumped)
        #expect(dumped.contains("alice") && dumped.contains("Alice") && !dumped.contains("Box"))
    }
}
