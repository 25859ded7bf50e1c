import Testing

@testable import UserSessions

struct SmokeTests {
    @Test func credentialsDescriptionHidesTokens() {
        let credentials = Credentials(accessToken: "secret-access", refreshToken: "secret-refresh")
        #expect(!"\(credentials)".contains("secret"))
        #expect(!String(reflecting: credentials).contains("secret"))
        var dumped = ""
        dump(credentials, to: &dumped)
        #expect(!dumped.contains("secret"))
    }
}
