import Foundation
import Testing

@testable import UserSessions

/// The OpenID Connect ID token kept with the credentials: stored by every store's format, absent from records
/// written before it existed, and never shown.
struct CredentialsIDTokenTests {
    static let credentials = Credentials(
        accessToken: "at-1", refreshToken: "rt-1", expiresAt: Date(timeIntervalSince1970: 2_000_000_000),
        source: .signIn, idToken: "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln")

    @Test func credentialsWrittenBeforeIDTokensExistedLoadWithout() throws {
        let old = Data(#"{"version": 1, "access_token": "at-1", "source": "sign_in"}"#.utf8)
        let decoded = try JSONDecoder().decode(Credentials.self, from: old)
        #expect(decoded.idToken == nil && decoded.accessToken == "at-1")
    }

    @Test func theIDTokenSurvivesTheSharedRecordFormatAndTheRemoteStoreFormat() throws {
        let session = StoredSession(userInfo: UserInfo(id: "a"), credentials: Self.credentials)
        let record = try StoredSessionRecord.encode(session, identifier: "a")
        #expect(
            try StoredSessionRecord.decode(record, identifier: "a", label: "record").credentials == Self.credentials)
        let remote = try RemoteTokenCacheProtocol.encodeSession(session, identifier: "a")
        #expect(try RemoteTokenCacheProtocol.decodeSession(remote).session.credentials == Self.credentials)
    }

    @Test func theFileStoreKeepsTheIDToken() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "idtoken-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = FileTokenStore(directory: directory)
        try await store.save(StoredSession(userInfo: UserInfo(id: "a"), credentials: Self.credentials), identifier: "a")
        #expect(try await store.load(identifier: "a")?.credentials?.idToken == Self.credentials.idToken)
    }

    @Test func aRefreshKeepsTheIDToken() throws {
        let body = Data(#"{"access_token": "at-2", "token_type": "Bearer", "expires_in": 60}"#.utf8)
        let refreshed = try OAuth2TokenRefresher.credentials(
            fromTokenResponse: HTTPTransportResponse(statusCode: 200, body: body), refreshing: Self.credentials,
            sentAt: Date())
        #expect(refreshed.accessToken == "at-2" && refreshed.idToken == Self.credentials.idToken)
    }

    @Test func theIDTokenIsRedacted() throws {
        let token = try #require(Self.credentials.idToken)
        var dumped = ""
        dump(Self.credentials, to: &dumped)
        for text in ["\(Self.credentials)", String(reflecting: Self.credentials), dumped] {
            #expect(!text.contains(token))
        }
        #expect("\(Self.credentials)".contains("idToken: <redacted>"))
    }
}
