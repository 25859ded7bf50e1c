#if Vapor
import Foundation
import Testing
import UserSessions
import UserSessionsVapor

/// The stores of the web-session layer behind the Vapor adapter: browser records in files keep a browser signed in
/// across a restart of the server. (The PostgreSQL store behind the Vapor example is exercised by the browser tests'
/// fleet and restart scenarios.)
struct VaporStoreTests {
    @Test func aFileStoreKeepsTheBrowserSignedInAcrossARestart() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "vapor-web-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let tokens = directory.appending(path: "tokens")
        let browsers = directory.appending(path: "browsers")

        let first = try VaporHarness(
            tokenStore: FileTokenStore(directory: tokens), store: FileWebSessionStore(directory: browsers))
        let cookie = try await first.signInAlice()
        try await first.run { client in
            var browser = client
            browser.cookie = cookie
            let page = try await browser.get("/app/page")
            #expect(page.text == "hello Alice Liddell")
        }
        let records = try FileManager.default.contentsOfDirectory(atPath: browsers.path)
        #expect(records.count == 1 && !records.contains { $0.contains(cookie) }, "kept under the cookie's hash")

        // A new process: a new registry restores the user from the token store.
        let second = try VaporHarness(
            tokenStore: FileTokenStore(directory: tokens), store: FileWebSessionStore(directory: browsers))
        try await second.run { client in
            var browser = client
            browser.cookie = cookie
            let restored = try await browser.get("/app/page")
            #expect(restored.text == "hello Alice Liddell")
            browser.cookie = String(repeating: "A", count: 43)
            let forged = try await browser.get("/app/page")
            #expect(forged.status == 401, "a forged cookie finds no record")
        }
    }
}
#endif
