#if Hummingbird
import Foundation
import Testing
import UserSessions
import UserSessionsHummingbird
import UserSessionsOpenIDConnect

/// The sign-in routes against a real Hummingbird server on 127.0.0.1 and the real OpenID Connect provider fixture.
@Suite(.enabled(if: Provider.isAvailable, "python3 with authlib and flask"))
struct SignInRouteTests {
    @Test func signingInSetsAnOpaqueHttpOnlyLaxCookieAndUserShowsClaimsButNoToken() async throws {
        try await Provider.with { provider in
            let harness = try WebHarness(openID: try provider.client())
            try await harness.run { client in
                let callback = try await provider.signIn(through: client, returnTo: "/app/page?tab=1")
                #expect(callback.status == 302)
                #expect(callback.location == "/app/page?tab=1", "back to returnTo")
                let attributes = try #require(callback.setCookie)
                let value = try #require(callback.cookieValue("user_session"))
                #expect(value.count == 43, "256 random bits, base64url")
                #expect(attributes.contains("HttpOnly") && attributes.contains("SameSite=Lax"))
                #expect(attributes.contains("Path=/"))
                #expect(!attributes.contains("Secure"), "loopback HTTP: no Secure, no __Host- prefix")
                #expect(!attributes.contains { $0.lowercased().hasPrefix("domain") })

                var signedIn = client
                signedIn.cookie = value
                let user = try await signedIn.get("/auth/user")
                #expect(user.status == 200)
                #expect(user.json["sub"] as? String == "248289761001")
                #expect(user.json["name"] as? String == "Alice Liddell")
                let credentials = try #require(try await harness.registry.store.load(identifier: "248289761001"))
                    .credentials
                let tokens = [credentials?.accessToken, credentials?.idToken, credentials?.refreshToken]
                for token in tokens.compactMap({ $0 }) {
                    #expect(!user.text.contains(token), "/user never shows a token")
                    #expect(!callback.text.contains(token) && callback.headers["Set-Cookie"]?.contains(token) != true)
                }
                #expect(try await signedIn.get("/app/page").text == "hello Alice Liddell")
            }
        }
    }

    @Test func aCookieBroughtToTheSignInIsReplacedAndNeverSignedIn() async throws {
        try await Provider.with { provider in
            let harness = try WebHarness(openID: try provider.client())
            try await harness.run { client in
                let first = try #require(try await provider.signIn(through: client).cookieValue("user_session"))
                var browser = client
                browser.cookie = first
                #expect(try await browser.get("/auth/user").status == 200)
                // Signing in again with that cookie (or one an attacker planted) issues a new one…
                let second = try #require(try await provider.signIn(through: browser).cookieValue("user_session"))
                #expect(second != first)
                // …and the old one no longer works.
                #expect(try await browser.get("/auth/user").status == 401)
                browser.cookie = second
                #expect(try await browser.get("/auth/user").status == 200)
                let planted = String(repeating: "A", count: 43)
                browser.cookie = planted
                let third = try #require(try await provider.signIn(through: browser).cookieValue("user_session"))
                #expect(third != planted)
            }
        }
    }

    @Test func returnToFallsBackToTheRootForAnythingButALocalPath() async throws {
        try await Provider.with { provider in
            let harness = try WebHarness(openID: try provider.client())
            try await harness.run { client in
                let cases: [(String, String)] = [
                    ("https://evil.example/x", "/"), ("//evil.example", "/"), ("/\\evil.example", "/"),
                    ("\\\\evil.example", "/"), ("javascript:alert(1)", "/"), ("/ok path", "/"),
                    ("evil.example", "/"), ("/app/page?x=1", "/app/page?x=1"),
                    // Normalized as the browser would resolve them: never a network-path reference.
                    ("/.//evil.example", "/evil.example"), ("/a/../..//evil.example", "/evil.example"),
                    ("/%2F%2Fevil.example", "/"), ("/%2e/%2fevil.example", "/"), ("/%5Cevil.example", "/"),
                    ("/app/./page/", "/app/page/"),
                ]
                for (returnTo, expected) in cases {
                    let callback = try await provider.signIn(through: client, returnTo: returnTo)
                    #expect(callback.location == expected, "returnTo \(returnTo)")
                }
            }
        }
    }

    @Test func logoutDeletesTheRecordRevokesAndRedirectsToTheProvidersEndSession() async throws {
        try await Provider.with { provider in
            try await withTemporaryDirectory { directory in
                let refresher = ScriptedRefresher([.token("unused")])
                let harness = try WebHarness(
                    openID: try provider.client(), refresher: refresher,
                    store: FileWebSessionStore(directory: directory)
                ) { $0.postLogoutRedirectPath = "/signed-out" }
                try await harness.run { client in
                    var browser = client
                    browser.cookie = try await provider.signIn(through: client).cookieValue("user_session")
                    #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).count == 1)
                    let logout = try await browser.send("POST", "/auth/logout", headers: [("Origin", client.origin)])
                    #expect(logout.status == 303)
                    let location = try #require(logout.location.flatMap { URLComponents(string: $0) })
                    #expect(location.path == "/logout" && location.port == provider.server.port)
                    let items = location.queryItems ?? []
                    #expect(
                        items.contains {
                            $0.name == "post_logout_redirect_uri" && $0.value == "\(client.origin)/signed-out"
                        })
                    #expect(items.contains { $0.name == "id_token_hint" })
                    #expect(
                        logout.setCookie(named: "user_session")?.contains("Max-Age=0") == true,
                        "the cookie is cleared: \(logout.setCookies)")
                    // The logout's state is kept in the browser for the post-logout page to check.
                    let state = try #require(items.first { $0.name == "state" }?.value)
                    let kept = try #require(logout.setCookie(named: "user_session_signout"))
                    #expect(kept.first == "user_session_signout=" + state && kept.contains("HttpOnly"))
                    #expect(refresher.revocations == 1, "closeAndClear revoked the credentials")
                    #expect(try await harness.registry.storedIdentifiers().isEmpty)
                    #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
                    #expect(try await browser.get("/auth/user").status == 401)
                }
            }
        }
    }

    @Test func aBackChannelLogoutDeletesEveryBrowserRecordOfTheUser() async throws {
        try await Provider.with { provider in
            try await withTemporaryDirectory { directory in
                let harness = try WebHarness(
                    openID: try provider.client(), store: FileWebSessionStore(directory: directory))
                try await harness.run { client in
                    var first = client
                    first.cookie = try await provider.signIn(through: client).cookieValue("user_session")
                    var second = client
                    second.cookie = try await provider.signIn(through: client).cookieValue("user_session")
                    #expect(try await first.get("/auth/user").status == 200)
                    #expect(try await second.get("/auth/user").status == 200)
                    let receiver = try #require(URL(string: client.base.absoluteString + "/auth/backchannel-logout"))
                    #expect(
                        try await provider.sendLogout(["sub": "248289761001", "fault": "wrong_aud"], to: receiver)
                            == 400)
                    #expect(
                        try await first.get("/auth/user").status == 200, "a token that does not verify ends nothing")
                    #expect(try await provider.sendLogout(["sub": "248289761001"], to: receiver) == 200)
                    #expect(try await first.get("/auth/user").status == 401)
                    #expect(try await second.get("/auth/user").status == 401)
                    #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
                    #expect(try await harness.registry.storedIdentifiers().isEmpty, "the tokens are gone too")
                }
            }
        }
    }
}

/// The whole path of the example against the provider fixture: its `example-app` client, its rotating refresh
/// tokens and its upstream API `/api/profile`.
@Suite(.enabled(if: Provider.isAvailable, "python3 with authlib and flask"))
struct ProviderUpstreamTests {
    @Test func theProxyRefreshesServerSideWhenTheProviderExpiresTheAccessToken() async throws {
        try await Provider.with { provider in
            let harness = try WebHarness(
                openID: try provider.client(example: true), refresher: try provider.refresher())
            let proxy = try TokenForwardingProxy(upstream: provider.issuer.appending(path: "api"))
            try await harness.run(upstream: proxy) { client in
                var browser = client
                browser.cookie = try await provider.signIn(through: client).cookieValue("user_session")
                let first = try await browser.get("/upstream/profile", headers: [("X-CSRF", "1")])
                #expect(first.status == 200)
                #expect(first.json["name"] as? String == "Alice Liddell")
                #expect(first.json["token_number"] as? Int == 1)
                try await provider.control("/control/expire-access-tokens")
                let second = try await browser.get("/upstream/profile", headers: [("X-CSRF", "1")])
                #expect(second.status == 200, "refreshed and replayed on the server; the browser saw nothing")
                #expect(second.json["token_number"] as? Int == 2)
                let stats = try await provider.stats()
                #expect(stats["refreshes"] as? Int == 1)
                #expect(stats["api_unauthorized"] as? Int == 1, "one 401, then the replay")
                #expect(stats["api_requests_with_cookies"] as? Int == 0, "no cookie ever reached the upstream")
            }
        }
    }
}

extension Client {
    /// The server's origin, as a browser sends it in `Origin`.
    var origin: String { "http://127.0.0.1:8080" }
}
#endif
