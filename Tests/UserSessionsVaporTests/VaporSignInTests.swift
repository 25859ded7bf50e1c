#if Vapor
import Foundation
import Testing
import UserSessions
import UserSessionsVapor

/// The sign-in routes through a real Vapor server on 127.0.0.1 and the real OpenID Connect provider fixture.
@Suite(.enabled(if: VaporProvider.isAvailable, "python3 with authlib and flask"))
struct VaporSignInTests {
    @Test func signingInSetsOpaqueHttpOnlyLaxCookiesAndUserShowsClaimsButNoToken() async throws {
        try await VaporProvider.with { provider in
            let harness = try VaporHarness(openID: try provider.client())
            try await harness.run { client in
                let (login, query, browser) = try await provider.startSignIn(through: client, returnTo: "/app/page")
                let pending = try #require(login.setCookie(named: VaporProvider.signInCookie))
                #expect(pending.contains("HttpOnly") && pending.contains("SameSite=Lax") && pending.contains("Path=/"))
                #expect(pending.contains("Max-Age=600"), "as long as the pending sign-in lives")

                let callback = try await browser.get("/auth/callback?" + query)
                #expect(callback.status == 302 && callback.location == "/app/page", "back to returnTo")
                let cookie = try #require(callback.setCookie(named: "user_session"))
                let value = String(try #require(cookie.first).dropFirst("user_session=".count))
                #expect(value.count == 43, "256 random bits, base64url")
                #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Path=/"))
                #expect(!cookie.contains("Secure"), "loopback HTTP: no Secure, no __Host- prefix")
                #expect(callback.setCookie(named: VaporProvider.signInCookie)?.contains("Max-Age=0") == true)

                var signedIn = client
                signedIn.cookie = value
                let user = try await signedIn.get("/auth/user")
                #expect(user.status == 200 && user.json["sub"] as? String == "248289761001")
                let credentials = try #require(try await harness.registry.store.load(identifier: "248289761001"))
                    .credentials
                for token in [credentials?.accessToken, credentials?.idToken].compactMap({ $0 }) {
                    #expect(!user.text.contains(token) && callback.headers["Set-Cookie"]?.contains(token) != true)
                }
                #expect(try await signedIn.get("/app/page").text == "hello Alice Liddell")

                // A callback replayed in the same browser signs nobody in and says why.
                let replay = try await browser.get("/auth/callback?" + query)
                #expect(replay.status == 400 && replay.setCookie(named: "user_session") == nil)
            }
        }
    }

    @Test func logoutClearsTheCookieAndABackChannelLogoutEndsTheOtherBrowsers() async throws {
        try await VaporProvider.with { provider in
            let harness = try VaporHarness(openID: try provider.client())
            try await harness.run { client in
                func signIn() async throws -> Browser {
                    let (_, query, browser) = try await provider.startSignIn(through: client)
                    let callback = try await browser.get("/auth/callback?" + query)
                    var signedIn = client
                    signedIn.cookie = try #require(callback.setCookie(named: "user_session")?.first)
                        .split(separator: "=", maxSplits: 1).last.map(String.init)
                    return signedIn
                }
                let first = try await signIn()
                let second = try await signIn()
                let logout = try await first.send(
                    "POST", "/auth/logout", headers: [("Origin", "http://127.0.0.1:8080")])
                #expect(logout.status == 303)
                #expect(logout.setCookie(named: "user_session")?.contains("Max-Age=0") == true)
                #expect(try await first.get("/auth/user").status == 401)

                let third = try await signIn()
                #expect(try await third.get("/auth/user").status == 200)
                let receiver = try #require(URL(string: client.base.absoluteString + "/auth/backchannel-logout"))
                let forged = try await provider.sendLogout(["sub": "248289761001", "fault": "wrong_aud"], to: receiver)
                #expect(forged == 400)
                #expect(try await third.get("/auth/user").status == 200, "a token that does not verify ends nothing")
                #expect(try await provider.sendLogout(["sub": "248289761001"], to: receiver) == 200)
                #expect(try await third.get("/auth/user").status == 401)
                #expect(try await second.get("/auth/user").status == 401)
                #expect(try await harness.registry.storedIdentifiers().isEmpty, "the tokens are gone too")
            }
        }
    }
}
#endif
