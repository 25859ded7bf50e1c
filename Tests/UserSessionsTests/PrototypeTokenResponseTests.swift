import Foundation
import Testing

@testable import UserSessions

/// `UserSessionPrototype(identifier:userInfo:tokenResponse:receivedAt:)`: an RFC 6749 §5.1 token response read by
/// the refresher's strict parser (issue 9, item 19), and the README's configuration snippet.
struct PrototypeTokenResponseTests {
    static let user = UserInfo(id: "ee977806d72865", email: "foo@bar.com", name: "Foo Bar")
    static let receivedAt = Date(timeIntervalSince1970: 1_800_000_000)

    @Test func readsAStandardTokenResponse() throws {
        let body = #"""
            {"access_token": "at-1", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "rt-1",
             "scope": "profile email"}
            """#
        let prototype = try UserSessionPrototype(
            userInfo: Self.user, tokenResponse: Data(body.utf8), receivedAt: Self.receivedAt)
        #expect(prototype.identifier == "ee977806d72865")
        #expect(prototype.userInfo == Self.user)
        let credentials = try #require(prototype.credentials)
        #expect(credentials.accessToken == "at-1")
        #expect(credentials.refreshToken == "rt-1")
        #expect(credentials.tokenType == "Bearer")
        #expect(credentials.expiresAt == Self.receivedAt.addingTimeInterval(3600))
        #expect(credentials.lastRefreshedAt == Self.receivedAt)
        #expect(credentials.source == .signIn)
        #expect(credentials.grantedPermissions == ["profile", "email"])
    }

    @Test func optionalFieldsMayBeMissingOrNull() throws {
        let body = #"{"access_token": "at-1", "expires_in": null, "refresh_token": null}"#
        let prototype = try UserSessionPrototype(
            identifier: "custom", userInfo: Self.user, tokenResponse: Data(body.utf8), receivedAt: Self.receivedAt)
        #expect(prototype.identifier == "custom")
        #expect(prototype.credentials?.refreshToken == nil)
        #expect(prototype.credentials?.expiresAt == nil)
        #expect(prototype.credentials?.tokenType == "Bearer")
        #expect(prototype.credentials?.grantedPermissions == [])
    }

    @Test(arguments: [
        "", "[]", "not json", #"{"token_type": "Bearer"}"#, #"{"access_token": ""}"#, #"{"access_token": 5}"#,
        #"{"access_token": "a", "expires_in": -1}"#, #"{"access_token": "a", "refresh_token": 7}"#,
        #"{"error": "invalid_grant"}"#, #"{"access_token": "a", "access_token": "b"}"#,
        String(repeating: "[", count: 200) + String(repeating: "]", count: 200),
    ])
    func refusesWhatTheRefresherRefuses(_ body: String) {
        let error = #expect(throws: UserSessionError.self) {
            try UserSessionPrototype(userInfo: Self.user, tokenResponse: Data(body.utf8))
        }
        #expect(error?.code == .malformedTokenResponse)
        // Same verdict as the refresher's own reading of a 200 with this body.
        let refresherError = #expect(throws: UserSessionError.self) {
            try OAuth2TokenRefresher.credentials(
                fromTokenResponse: HTTPTransportResponse(statusCode: 200, body: Data(body.utf8)),
                refreshing: Credentials(accessToken: "x"), sentAt: Self.receivedAt)
        }
        #expect(refresherError?.code == error?.code)
    }

    /// The README's "Configuration, and sessions from a token response" snippet, compiled and run.
    @Test func theReadmeConfigurationSnippetRuns() async throws {
        let store = InMemoryTokenStore()
        let refresher: any TokenRefresher = ScriptedRefresher()

        let configuration = UserSessionController.Configuration(
            serviceStopTimeout: .seconds(5),
            storeTimeout: .seconds(5),
            // The default breaker: more than 3 refreshes within 30 s.
            refreshLoopPolicy: UserSessionController.RefreshLoopPolicy(maximumRefreshes: 3, window: .seconds(30)))
        let controller = UserSessionController(store: store, refresher: refresher, configuration: configuration)

        let tokenResponse = Data(
            #"{"access_token": "…", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "…"}"#.utf8)
        let prototype = try UserSessionPrototype(
            userInfo: UserInfo(id: "ee977806d72865", email: "foo@bar.com", name: "Foo Bar"),
            tokenResponse: tokenResponse)
        _ = try await controller.open(prototype)

        #expect(configuration.refreshLoopPolicy == UserSessionController.RefreshLoopPolicy())
        #expect(try await store.load(identifier: "ee977806d72865")?.credentials?.accessToken == "…")
        await controller.shutdown()
    }
}
