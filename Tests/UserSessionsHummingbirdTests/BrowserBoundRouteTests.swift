#if Hummingbird
import Foundation
import Hummingbird
import Testing
import UserSessions
import UserSessionsHummingbird
import UserSessionsOpenIDConnect

/// The sign-in routes keep the pending sign-in in the browser that started it (issue 26): a callback URL opened in
/// another browser signs nobody in, and a flood of `/auth/login` keeps nothing on the server.
@Suite(.enabled(if: Provider.isAvailable, "python3 with authlib and flask"))
struct BrowserBoundRouteTests {
    @Test func loginKeepsThePendingSignInInAShortLivedHttpOnlyLaxCookie() async throws {
        try await Provider.with { provider in
            let harness = try WebHarness(openID: try provider.client())
            try await harness.run { client in
                let login = try await client.get("/auth/login?returnTo=%2Fapp%2Fpage")
                #expect(login.status == 302)
                let cookie = try #require(login.setCookie(named: Provider.signInCookie))
                #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Path=/"))
                #expect(cookie.contains("Max-Age=600"), "as long as the pending sign-in lives")
                #expect(!cookie.contains("Secure"), "loopback HTTP: no Secure, no __Host- prefix")
                let value = try #require(cookie.first?.split(separator: "=", maxSplits: 1).last)
                let location = try #require(login.location)
                #expect(!location.contains(value), "the sealed state never goes into a URL")
                // The callback clears it, whatever its outcome.
                let (query, browser) = try await provider.startSignIn(through: client)
                let callback = try await browser.get("/auth/callback?" + query)
                #expect(callback.status == 302)
                #expect(callback.setCookie(named: Provider.signInCookie)?.contains("Max-Age=0") == true)
            }
        }
    }

    @Test func aCallbackURLOpenedInAnotherBrowserSignsNobodyInAndSaysWhy() async throws {
        try await Provider.with { provider in
            let harness = try WebHarness(openID: try provider.client())
            try await harness.run { client in
                // The attacker's browser stops at the redirect back; the victim's browser opens that URL.
                let (query, _) = try await provider.startSignIn(through: client)
                let victim = try await client.get("/auth/callback?" + query, headers: [("Accept", "text/html")])
                #expect(victim.status == 400)
                #expect(victim.headers["Content-Type"]?.hasPrefix("text/html") == true)
                #expect(victim.text.contains("not started in this browser"))
                #expect(victim.text.contains("pendingSignInMissing"))
                #expect(victim.cookieValue("user_session") == nil, "no session cookie")
                #expect(victim.headers["Cache-Control"] == "no-store")
                // A victim who had started a sign-in of their own: refused too.
                let (_, victimsBrowser) = try await provider.startSignIn(through: client)
                let mixed = try await victimsBrowser.get("/auth/callback?" + query)
                #expect(mixed.status == 400)
                #expect(mixed.json["code"] as? String == "stateMismatch")
                #expect(try await harness.registry.storedIdentifiers().isEmpty, "nobody was signed in")
                #expect(try await provider.stats()["token_requests"] as? Int == 0, "the code was never redeemed")
            }
        }
    }

    @Test func tenThousandLoginsKeepNothingOnTheServerAndARealSignInSucceeds() async throws {
        try await Provider.with { provider in
            let stateStore = InMemoryOpenIDConnectStateStore()
            let harness = try WebHarness(openID: try provider.client(stateStore: stateStore))
            try await harness.run { client in
                try await withThrowingTaskGroup(of: Int.self) { group in
                    for lane in 0..<8 {
                        group.addTask {
                            var redirected = 0
                            for _ in stride(from: lane, to: 10_000, by: 8) {
                                if try await client.get("/auth/login").status == 302 { redirected += 1 }
                            }
                            return redirected
                        }
                    }
                    var total = 0
                    for try await redirected in group { total += redirected }
                    #expect(total == 10_000, "every login was answered")
                }
                #expect(stateStore.pendingCount == 0, "no pending sign-in on the server")
                let callback = try await provider.signIn(through: client)
                #expect(callback.status == 302)
                #expect(callback.cookieValue("user_session") != nil, "a real user signs in after the flood")
            }
        }
    }
}

/// Pages behind the session are never cached, the security headers, and `returnTo` normalization.
struct PageHeaderTests {
    @Test func pagesBehindTheSessionAreNotCachedUnlessTheRouteSaysSo() async throws {
        let harness = try WebHarness()
        let router = harness.router()
        router.group("cached").add(middleware: harness.sessions.middleware(.required))
            .get("page") { _, _ -> Response in
                Response(status: .ok, headers: [.cacheControl: "private, max-age=60"])
            }
        router.group("default-cache").add(middleware: harness.sessions.middleware(.required, noStore: false))
            .get("page") { _, _ in "plain" }
        try await withLiveServer(router) { base in
            var browser = Client(base: base)
            browser.cookie = try await harness.signInAlice()
            let page = try await browser.get("/app/page")
            #expect(page.status == 200)
            #expect(page.headers["Cache-Control"] == "no-store", "the back button never shows it after sign-out")
            #expect(try await browser.get("/cached/page").headers["Cache-Control"] == "private, max-age=60")
            #expect(try await browser.get("/default-cache/page").headers["Cache-Control"] == nil)
        }
        await harness.registry.shutdown()
    }

    @Test func theSecurityHeadersMiddlewareSetsWhatThePageDoesNot() async throws {
        let harness = try WebHarness()
        let router = Router(context: BasicWebSessionRequestContext.self)
        router.add(middleware: harness.sessions.securityHeadersMiddleware())
        router.get("plain") { _, _ in "plain" }
        router.get("own") { _, _ -> Response in
            Response(status: .ok, headers: [.contentSecurityPolicy: "default-src 'self'; frame-ancestors 'self'"])
        }
        try await withLiveServer(router) { base in
            let plain = try await Client(base: base).get("/plain")
            #expect(plain.headers["Content-Security-Policy"] == "frame-ancestors 'none'")
            #expect(plain.headers["X-Frame-Options"] == "DENY")
            #expect(plain.headers["X-Content-Type-Options"] == "nosniff")
            #expect(plain.headers["Referrer-Policy"] == "same-origin")
            let own = try await Client(base: base).get("/own")
            #expect(own.headers["Content-Security-Policy"] == "default-src 'self'; frame-ancestors 'self'")
            #expect(own.headers["X-Frame-Options"] == nil)
        }
        await harness.registry.shutdown()
    }
}

/// Two instances of one machine sharing file stores: a back-channel logout received by one signs the browser out on
/// the other (issue 26: which stores carry a sign-out to other instances).
@Suite(.enabled(if: Provider.isAvailable, "python3 with authlib and flask"))
struct FileStoreFleetTests {
    @Test func aBackChannelLogoutOnOneInstanceSignsTheBrowserOutOnTheOther() async throws {
        try await Provider.with { provider in
            try await withTemporaryDirectory { directory in
                func instance() throws -> WebHarness {
                    try WebHarness(
                        openID: try provider.client(
                            stateStore: FileOpenIDConnectStateStore(directory: directory.appending(path: "oidc"))),
                        tokenStore: FileTokenStore(directory: directory.appending(path: "tokens")),
                        store: FileWebSessionStore(directory: directory.appending(path: "browsers")))
                }
                let (first, second) = (try instance(), try instance())
                try await first.run { one in
                    try await second.run { two in
                        var browserOnOne = one
                        browserOnOne.cookie = try await provider.signIn(through: one).cookieValue("user_session")
                        #expect(try await browserOnOne.get("/auth/user").status == 200)
                        var browserOnTwo = two
                        browserOnTwo.cookie = browserOnOne.cookie
                        #expect(try await browserOnTwo.get("/auth/user").status == 200, "the other instance knows it")
                        let receiver = try #require(URL(string: two.base.absoluteString + "/auth/backchannel-logout"))
                        #expect(try await provider.sendLogout(["sub": "248289761001"], to: receiver) == 200)
                        #expect(try await browserOnOne.get("/auth/user").status == 401, "signed out on the first too")
                        #expect(try await browserOnOne.get("/app/page").status == 401)
                        #expect(try await first.registry.storedIdentifiers().isEmpty, "the tokens are gone")
                    }
                }
            }
        }
    }
}
#endif
