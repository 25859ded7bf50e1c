import Foundation
import Testing

@testable import UserSessions

// The README's quick start, compiled and run against a real token endpoint on 127.0.0.1 so the README stays true.
// Only the store directory, the endpoint URL and the sign-in response's tokens differ from the README; keep the
// rest in step with it.

private struct Unauthorized: Error {}

/// Stands in for "your HTTP call": the first call answers 401 to exercise the replay.
private final class ProfileAPI: Sendable {
    private let calls = ArrivalCounter()

    func fetchProfile(token: String) async throws -> String {
        calls.arrive()
        if calls.count == 1 { throw Unauthorized() }
        return "profile(\(token.prefix(3)))"
    }
}

private func quickStart(
    storeDirectory: URL, tokenEndpoint: URL, signIn: (refreshToken: String, accessToken: String), api: ProfileAPI
) async throws -> [String] {
    func fetchProfile(token: String) async throws -> String { try await api.fetchProfile(token: token) }
    let collected = ServiceLog()  // the event kinds the printer saw

    // 1. A controller with the embedded file store and an OAuth 2.0 refresher.
    let controller = UserSessionController(
        store: FileTokenStore(directory: storeDirectory),
        refresher: try OAuth2TokenRefresher(
            tokenEndpoint: tokenEndpoint,
            clientAuthentication: .clientSecretBasic(id: "my-app", secret: "client-secret")))

    // 2. Subscribe: the first event describes the current state, then every change follows in order.
    let events = controller.events()
    let printer = Task {
        for await event in events {
            print(event.kind, event.session.state)
            collected.append("\(event.kind)")
        }
    }

    // 3. Launch: restore the last user if their stored credentials are still usable…
    if try await controller.restore() == nil {
        // …otherwise open a session from a sign-in response.
        let response = Data(
            """
            {"result": {"user": {"id": "ee977806d72865", "email": "foo@bar.com", "name": "Foo Bar"},
                        "access_token": "\(signIn.accessToken)", "refresh_token": "\(signIn.refreshToken)",
                        "expires_in": 3600, "scope": "profile"}}
            """.utf8)
        _ = try await controller.open(UserSessionPrototype(signInResponse: response))
    }

    // 4. Get a valid access token (refreshed first, once, if it is about to expire)…
    let token = try await controller.accessToken()
    #expect(token == signIn.accessToken)  // a fresh one-hour token is served as is

    // …or let the controller refresh and replay once when the server answers 401.
    let profile = try await controller.withAccessToken(isAuthenticationFailure: { $0 is Unauthorized }) { token in
        try await fetchProfile(token: token)  // your HTTP call; throw Unauthorized on a 401
    }
    #expect(profile.hasPrefix("profile(at-"))

    // 5. Close (credentials stay stored, so `restore()` works after a restart), or sign out for good (with a
    //    `revocationEndpoint`, this also revokes the refresh token at the server, within `revocationTimeout`).
    await controller.close()
    #expect(FileManager.default.fileExists(atPath: storeDirectory.path))
    #expect(try await controller.restore()?.state == .opened)  // the restart path, here in one process
    try await controller.closeAndClear()
    await controller.shutdown()  // finishes every event stream
    await printer.value
    return collected.all
}

struct QuickStartTests {
    @Test func readmeQuickStartRunsAgainstALocalTokenEndpoint() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("quick-start-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await OAuthFixtureServer.with(["--client-id", "my-app", "--client-secret", "client-secret"]) { server in
            let signIn = try await server.issue()
            let kinds = try await quickStart(
                storeDirectory: directory, tokenEndpoint: server.tokenEndpoint, signIn: signIn, api: ProfileAPI())
            #expect(kinds.first == "current")
            #expect(kinds.filter { $0 == "opened" }.count == 2)  // the sign-in and the restore
            #expect(kinds.filter { $0 == "credentialsRefreshed" }.count == 1)
            #expect(kinds.suffix(3) == ["closed(requested)", "opened", "closed(cleared)"])
            let stats = try await server.stats()
            #expect(stats.refreshes == 1)  // the 401 replay's
            #expect(stats.invalidGrant == 0)
        }
        // closeAndClear removed the stored session and the persisted identifier.
        let store = FileTokenStore(directory: directory)
        #expect(try await store.storedIdentifiers() == [])
        #expect(try await store.loadCurrentIdentifier() == nil)
    }
}
