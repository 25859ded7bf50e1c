#if Hummingbird
import Foundation
import Testing
import UserSessions
import UserSessionsHummingbird
import UserSessionsTestSupport

/// The session middleware, CSRF checks and expiry against a real Hummingbird server on 127.0.0.1, with sessions
/// opened directly (no provider) and scripted refreshers.
struct MiddlewareTests {
    @Test func navigationsWithoutASessionAreSentToLoginAndOtherRequestsGetAJSON401() async throws {
        let harness = try WebHarness()
        try await harness.run { client in
            let navigation = try await client.get("/app/page?tab=a%20b", headers: [("Accept", "text/html")])
            #expect(navigation.status == 302)
            #expect(navigation.location == "/auth/login?returnTo=%2Fapp%2Fpage%3Ftab%3Da%2520b")
            let api = try await client.get("/app/page", headers: [("Accept", "application/json")])
            #expect(api.status == 401)
            #expect(api.json["error"] as? String == "unauthenticated")
            let user = try await client.get("/auth/user", headers: [("Accept", "text/html")])
            #expect(user.status == 401, "/user is an API: never a redirect")
            let garbage = try await client.get("/app/page", cookie: "../../etc/passwd")
            #expect(garbage.status == 401)
            #expect(garbage.setCookie?.contains("Max-Age=0") == true, "an unknown cookie is cleared")
        }
    }

    @Test func aTerminalRefreshFailureSignsTheBrowserOut() async throws {
        let refresher = ScriptedRefresher([.failure(.terminal)])
        let harness = try WebHarness(refresher: refresher)
        try await harness.run { client in
            var browser = client
            browser.cookie = try await harness.signInAlice(alice(expired: true))
            let reply = try await browser.get("/app/token")
            #expect(reply.status == 401)
            #expect(reply.setCookie?.contains("Max-Age=0") == true, "the cookie is cleared")
            #expect(refresher.refreshes == 1)
            #expect(try await browser.get("/auth/user").status == 401, "the record is gone")
            #expect(try await harness.registry.storedIdentifiers().isEmpty, "the revoked session is cleared")
        }
    }

    @Test func aTransientRefreshFailureIsA503ThatKeepsTheSession() async throws {
        let refresher = ScriptedRefresher([.failure(.transient)])
        let harness = try WebHarness(refresher: refresher)
        try await harness.run { client in
            var browser = client
            browser.cookie = try await harness.signInAlice(alice(expired: true))
            let reply = try await browser.get("/app/token")
            #expect(reply.status == 503)
            #expect(reply.headers["Retry-After"] != nil)
            #expect(reply.setCookie == nil, "the cookie stays")
            #expect(refresher.refreshes == 1)
            #expect(try await browser.get("/auth/user").status == 200, "still signed in")
            #expect(try await harness.registry.storedIdentifiers() == ["alice"])
        }
    }

    @Test func stateChangingRequestsFromAnotherSiteAreRefused() async throws {
        let harness = try WebHarness()
        try await harness.run { client in
            var browser = client
            browser.cookie = try await harness.signInAlice()
            let crossOrigin = try await browser.send("POST", "/change", headers: [("Origin", "http://evil.example")])
            #expect(crossOrigin.status == 403)
            let nullOrigin = try await browser.send("POST", "/change", headers: [("Origin", "null")])
            #expect(nullOrigin.status == 403)
            let crossSite = try await browser.send("POST", "/change", headers: [("Sec-Fetch-Site", "cross-site")])
            #expect(crossSite.status == 403)
            let logout = try await browser.send("POST", "/auth/logout", headers: [("Origin", "http://evil.example")])
            #expect(logout.status == 403)
            #expect(try await browser.get("/auth/user").status == 200, "a cross-site logout signs nobody out")
            let sameOrigin = try await browser.send(
                "POST", "/change", headers: [("Origin", client.origin), ("Sec-Fetch-Site", "same-origin")])
            #expect(sameOrigin.status == 200 && sameOrigin.text == "changed")
        }
    }

    @Test func theIdleAndTheAbsoluteLifetimeEndTheBrowsersSession() async throws {
        let clock = ManualClock()
        let harness = try WebHarness {
            $0.clock = clock.sessionClock
            $0.idleTimeout = .seconds(600)
            $0.absoluteLifetime = .seconds(2000)
            $0.touchInterval = .seconds(60)
        }
        try await harness.run { client in
            var browser = client
            browser.cookie = try await harness.signInAlice()
            clock.advance(599)
            #expect(try await browser.get("/auth/user").status == 200, "within the idle timeout; touched")
            clock.advance(599)
            #expect(try await browser.get("/auth/user").status == 200, "idle 599 s since the last request")
            clock.advance(600)
            let idle = try await browser.get("/auth/user")
            #expect(idle.status == 401, "idle for 600 s")
            #expect(idle.setCookie?.contains("Max-Age=0") == true)

            browser.cookie = try await harness.signInAlice()
            for _ in 0..<3 {
                clock.advance(500)
                #expect(try await browser.get("/auth/user").status == 200)
            }
            clock.advance(500)
            #expect(try await browser.get("/auth/user").status == 401, "2000 s after the sign-in, however active")
            #expect(try await harness.sessions.removeExpiredRecords() == 0, "the ended records are already gone")
        }
    }

    @Test func aCorruptRecordIsATypedErrorAndSignsTheBrowserOut() async throws {
        try await withTemporaryDirectory { directory in
            let store = FileWebSessionStore(directory: directory)
            let harness = try WebHarness(store: store)
            try await harness.run { client in
                var browser = client
                browser.cookie = try await harness.signInAlice()
                let file = try #require(
                    try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil).first)
                let key = try #require(WebSessionKey(hash: file.deletingPathExtension().lastPathComponent))
                let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
                #expect((attributes[.posixPermissions] as? Int) == 0o600)
                let corruptions: [Data] = [
                    Data("{\"version\": 1, \"identifier\": ".utf8), Data([0xFF, 0x00, 0x7B]),
                    Data("{\"version\":99}".utf8), Data(repeating: 0x20, count: 70_000),
                ]
                for corruption in corruptions {
                    try corruption.write(to: file)
                    await #expect(throws: WebSessionError(.storeCorrupt, "")) { try await store.load(key: key) }
                }
                let reply = try await browser.get("/auth/user")
                #expect(reply.status == 401)
                #expect(reply.setCookie?.contains("Max-Age=0") == true)
                #expect(!FileManager.default.fileExists(atPath: file.path), "the unreadable record is removed")
            }
        }
    }

    @Test(arguments: PlantedFile.allCases)
    func aPlantedRecordFileIsStoreCorruptNeverFollowed(_ kind: PlantedFile) async throws {
        try await withTemporaryDirectory { directory in
            let store = FileWebSessionStore(directory: directory.appending(path: "browsers"))
            let now = Date(timeIntervalSince1970: 1_800_000_000)
            let key = try #require(WebSessionKey(hash: String(repeating: "a", count: 64)))
            let record = WebSessionRecord(
                identifier: "alice", subject: "alice", sessionID: nil, claims: [:], createdAt: now, lastSeenAt: now,
                absoluteExpiresAt: now + 3600)
            try await store.insert(record, key: key)
            let file = store.directory.appending(path: key.hash + ".json")
            let outside = directory.appending(path: "outside.json")
            let valid = try kind.plant(at: file, outside: outside)
            await #expect(throws: WebSessionError(.storeCorrupt, "")) { try await store.load(key: key) }
            #expect(try await store.removeExpired(now: now, idleTimeout: .seconds(600)) == 1)
            #expect(try Data(contentsOf: outside) == valid, "the file a link pointed to is untouched")
            #expect(try await store.load(key: key) == nil)
        }
    }

    @Test func theFileStoreRemovesByUserAndExpiryPastUnreadableFiles() async throws {
        try await withTemporaryDirectory { directory in
            let store = FileWebSessionStore(directory: directory)
            let now = Date(timeIntervalSince1970: 1_800_000_000)
            func record(_ identifier: String, lastSeenAt: Date) -> WebSessionRecord {
                WebSessionRecord(
                    identifier: identifier, subject: identifier, sessionID: nil, claims: [:], createdAt: lastSeenAt,
                    lastSeenAt: lastSeenAt, absoluteExpiresAt: now + 3600)
            }
            let keys = (0..<3).compactMap { WebSessionKey(hash: String(repeating: "\($0)", count: 64)) }
            try #require(keys.count == 3)
            try await store.insert(record("alice", lastSeenAt: now), key: keys[0])
            try await store.insert(record("alice", lastSeenAt: now), key: keys[1])
            try await store.insert(record("bob", lastSeenAt: now - 900), key: keys[2])
            try Data(repeating: 0x20, count: 70_000).write(
                to: directory.appending(path: String(repeating: "f", count: 64) + ".json"))
            #expect(try await store.removeAll(identifier: "alice") == 2, "an unreadable file stops nothing")
            #expect(try await store.load(key: keys[2])?.identifier == "bob")
            #expect(try await store.removeExpired(now: now, idleTimeout: .seconds(600)) == 2, "bob and the garbage")
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
        }
    }

    @Test func theFileStoreSeesWhatAnotherProcessWroteThoughItKeepsDecodedRecords() async throws {
        try await withTemporaryDirectory { directory in
            // Two stores over one directory stand for two server processes of one machine.
            let (first, second) = (FileWebSessionStore(directory: directory), FileWebSessionStore(directory: directory))
            let now = Date(timeIntervalSince1970: 1_800_000_000)
            let key = try #require(WebSessionKey(hash: String(repeating: "c", count: 64)))
            func record(_ identifier: String) -> WebSessionRecord {
                WebSessionRecord(
                    identifier: identifier, subject: identifier, sessionID: nil, claims: [:], createdAt: now,
                    lastSeenAt: now, absoluteExpiresAt: now + 3600)
            }
            try await first.insert(record("alice"), key: key)
            #expect(try await first.load(key: key)?.identifier == "alice")
            #expect(try await first.load(key: key)?.identifier == "alice", "the same bytes, the same record")
            try await second.insert(record("bob"), key: key)
            #expect(try await first.load(key: key)?.identifier == "bob", "a rewritten record is read again")
            try await second.touch(key: key, lastSeenAt: now + 60)
            #expect(try await first.load(key: key)?.lastSeenAt == now + 60)
            let file = directory.appending(path: key.hash + ".json")
            let valid = try Data(contentsOf: file)
            try Data("{}".utf8).write(to: file)
            await #expect(throws: WebSessionError(.storeCorrupt, "")) { try await first.load(key: key) }
            try valid.write(to: file)
            #expect(try await first.load(key: key)?.identifier == "bob")
            try await second.remove(key: key)
            #expect(try await first.load(key: key) == nil, "a record removed elsewhere is gone here too")
        }
    }

    @Test func theConfigurationRefusesWhatCannotBeSafe() throws {
        let plainHTTP = try #require(URL(string: "http://app.example.com"))
        #expect(throws: WebSessionError(.invalidConfiguration, "")) {
            try WebSessionConfiguration(publicURL: plainHTTP).validate()
        }
        let secure = WebSessionConfiguration(publicURL: try #require(URL(string: "https://app.example.com:8443/x")))
        #expect(secure.isSecure && secure.cookieName == "__Host-user_session")
        #expect(secure.callbackURL.absoluteString == "https://app.example.com:8443/auth/callback")
        var outside = secure
        outside.postLogoutRedirectPath = "//evil.example"
        #expect(throws: WebSessionError(.invalidConfiguration, "")) { try outside.validate() }
        var inverted = secure
        inverted.idleTimeout = .seconds(7200)
        inverted.absoluteLifetime = .seconds(3600)
        #expect(throws: WebSessionError(.invalidConfiguration, "")) { try inverted.validate() }
    }
}
#endif
