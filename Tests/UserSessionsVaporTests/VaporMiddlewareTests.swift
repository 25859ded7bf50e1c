#if Vapor
import Foundation
import Testing
import UserSessions
import UserSessionsVapor

/// The session middleware, the CSRF check and the security headers through a real Vapor server on 127.0.0.1: the
/// same answers as the Hummingbird adapter's, decided by the same layer.
struct VaporMiddlewareTests {
    @Test func aSignedInBrowserReachesItsPageThroughReqAuthAndTheAnswerIsNeverCached() async throws {
        let harness = try VaporHarness()
        try await harness.run { client in
            var browser = client
            browser.cookie = try await harness.signInAlice()
            let page = try await browser.get("/app/page")
            #expect(page.status == 200)
            #expect(page.text == "hello Alice Liddell", "the session is in req.auth")
            #expect(page.headers["Cache-Control"] == "no-store")
            #expect(page.headers["X-Frame-Options"] == "DENY" && page.headers["X-Content-Type-Options"] == "nosniff")
            let user = try await browser.get("/auth/user")
            #expect(user.status == 200)
            #expect(user.json["sub"] as? String == "248289761001" && user.json["name"] as? String == "Alice Liddell")
            #expect(!user.text.contains("token-1"), "/user never shows a token")
        }
    }

    @Test func withoutASessionNavigationsGoToTheLoginAndOtherRequestsGetA401() async throws {
        let harness = try VaporHarness()
        try await harness.run { client in
            let navigation = try await client.get("/app/page?tab=1", headers: [("Accept", "text/html")])
            #expect(navigation.status == 302)
            #expect(navigation.location == "/auth/login?returnTo=%2Fapp%2Fpage%3Ftab%3D1")
            let api = try await client.get("/app/page")
            #expect(api.status == 401 && api.json["error"] as? String == "unauthenticated")
            #expect(api.headers["Cache-Control"] == "no-store")
            #expect(try await client.get("/auth/user").status == 401)

            var garbage = client
            garbage.cookie = "not-a-cookie-this-library-issued"
            let refused = try await garbage.get("/app/page")
            #expect(refused.status == 401)
            #expect(refused.setCookie(named: "user_session")?.contains("Max-Age=0") == true, "the cookie is cleared")
        }
    }

    @Test func onHTTPSTheClearedCookieIsHostPrefixedSecureHttpOnlyAndLax() async throws {
        let harness = try VaporHarness(publicURL: "https://app.example.com")
        try await harness.run { client in
            var browser = client
            browser.cookie = "garbage"
            let reply = try await browser.get("/app/page")
            let cookie = try #require(reply.setCookie(named: "__Host-user_session"))
            for attribute in ["Max-Age=0", "Path=/", "Secure", "HttpOnly", "SameSite=Lax"] {
                #expect(cookie.contains(attribute), "\(attribute) in \(cookie.dropFirst())")
            }
            #expect(!cookie.contains { $0.lowercased().hasPrefix("domain") })
        }
    }

    @Test func crossSiteStateChangesAreRefusedAndSameOriginOnesPass() async throws {
        let harness = try VaporHarness()
        try await harness.run { client in
            let crossOrigin = try await client.send("POST", "/change", headers: [("Origin", "https://evil.example")])
            #expect(crossOrigin.status == 403 && crossOrigin.json["error"] as? String == "csrf")
            let nullOrigin = try await client.send("POST", "/change", headers: [("Origin", "null")])
            #expect(nullOrigin.status == 403)
            let crossSite = try await client.send("POST", "/change", headers: [("Sec-Fetch-Site", "cross-site")])
            #expect(crossSite.status == 403)
            let logout = try await client.send("POST", "/auth/logout", headers: [("Origin", "https://evil.example")])
            #expect(logout.status == 403, "the logout route refuses a cross-site request")
            let sameOrigin = try await client.send(
                "POST", "/change", headers: [("Origin", "http://127.0.0.1:8080"), ("Sec-Fetch-Site", "same-origin")])
            #expect(sameOrigin.status == 200 && sameOrigin.text == "changed")
        }
    }

    @Test func aBackChannelLogoutWithoutAVerifiedTokenIsRefusedAndExemptFromTheOriginCheck() async throws {
        let harness = try VaporHarness()
        try await harness.run { client in
            let empty = try await client.send(
                "POST", "/auth/backchannel-logout", headers: [("Content-Type", "application/x-www-form-urlencoded")],
                body: Data("other=1".utf8))
            #expect(empty.status == 400 && empty.json["error"] as? String == "invalid_request")
            let tooLarge = try await client.send(
                "POST", "/auth/backchannel-logout", headers: [("Content-Type", "application/x-www-form-urlencoded")],
                body: Data(("logout_token=" + String(repeating: "a", count: 70_000)).utf8))
            #expect(tooLarge.status == 400, "over the layer's 64 KiB limit")
        }
    }
}
#endif
