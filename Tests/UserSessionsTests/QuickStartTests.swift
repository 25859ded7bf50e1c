import Foundation
import Testing

@testable import UserSessions

// The README's quick start, compiled and run against a real token endpoint on 127.0.0.1. The lines between the
// BEGIN and END markers below are the README's ```swift block under "## Quick start", byte for byte, except for its
// `import` lines (this file has its own), four spaces of indentation, and the substitutions listed in
// `QuickStartTests.substitutions` (the store directory, the endpoint, the tokens). The test
// `theProgramHereIsTheReadmesQuickStart` fails as soon as the two differ: change both together.

/// Stands in for "your HTTP call": the first call fails with `unauthorized` (a 401) to exercise the replay.
private final class ProfileAPI: Sendable {
    private let calls = ArrivalCounter()

    func fetchProfile(token: String, unauthorized: any Error) async throws -> String {
        calls.arrive()
        if calls.count == 1 { throw unauthorized }
        return "profile(\(token.prefix(3)))"
    }
}

/// The README's program, with what it leaves to the reader supplied here: `fetchProfile`, and a `print` that
/// records what the event printer prints.
private func readmeQuickStart(
    storeDirectory: URL, tokenEndpoint: URL, signIn: (refreshToken: String, accessToken: String), api: ProfileAPI,
    printed: ServiceLog
) async throws -> (token: String, profile: String) {
    @Sendable func print(_ items: Any...) { printed.append(items.map { "\($0)" }.joined(separator: " ")) }
    func fetchProfile(token: String) async throws -> String {
        try await api.fetchProfile(token: token, unauthorized: Unauthorized())
    }

    // BEGIN README QUICK START
    struct Unauthorized: Error {}

    // 1. A controller with the embedded file store and an OAuth 2.0 refresher.
    let controller = UserSessionController(
        store: FileTokenStore(directory: storeDirectory),
        refresher: try OAuth2TokenRefresher(
            tokenEndpoint: tokenEndpoint,
            clientAuthentication: .clientSecretBasic(id: "my-app", secret: "client-secret")))

    // 2. Subscribe: the first event describes the current state, then every change follows in order.
    let events = controller.events()
    let printer = Task {
        for await event in events { print(event.kind, event.session.state) }
    }

    // 3. Launch: restore the last user if their stored credentials are still usable…
    if try await controller.restore() == nil {
        // …otherwise open a session from a sign-in response.
        let response = Data(
            #"""
            {"result": {"user": {"id": "ee977806d72865", "email": "foo@bar.com", "name": "Foo Bar"},
                        "access_token": "\#(signIn.accessToken)",
                        "refresh_token": "\#(signIn.refreshToken)", "expires_in": 3600, "scope": "profile"}}
            """#.utf8)
        _ = try await controller.open(UserSessionPrototype(signInResponse: response))
    }

    // 4. Get a valid access token (refreshed first, once, if it is about to expire)…
    let token = try await controller.accessToken()

    // …or let the controller refresh and replay once when the server answers 401.
    let profile = try await controller.withAccessToken(isAuthenticationFailure: { $0 is Unauthorized }) { token in
        try await fetchProfile(token: token)  // your HTTP call; throw Unauthorized on a 401
    }

    // 5. Close (credentials stay stored, so `restore()` works after a restart), or sign out for good (with a
    //    `revocationEndpoint`, this also revokes the refresh token at the server, within `revocationTimeout`).
    await controller.close()
    try await controller.closeAndClear()
    await controller.shutdown()  // finishes every event stream
    await printer.value
    // END README QUICK START
    return (token, profile)
}

struct QuickStartTests {
    /// What differs between the README's block and the program above, each occurring exactly once in the README.
    static let substitutions: [(readme: String, here: String)] = [
        ("FileTokenStore.defaultDirectory()", "storeDirectory"),
        (#"URL(string: "https://auth.example.com/oauth/token")!"#, "tokenEndpoint"),
        (
            #""access_token": "…", "refresh_token": "…""#,
            ##""access_token": "\#(signIn.accessToken)",\##n                    "refresh_token": "\#(signIn.refreshToken)""##
        ),
    ]

    @Test func theProgramHereIsTheReadmesQuickStart() throws {
        let difference = try ReadmeBlock.difference(
            heading: "## Quick start", substitutions: Self.substitutions, sourceFile: #filePath,
            marker: "README QUICK START")
        #expect(difference == nil, "\(difference ?? "")")
    }

    @Test func readmeQuickStartRunsAgainstALocalTokenEndpoint() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("quick-start-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await OAuthFixtureServer.with(["--client-id", "my-app", "--client-secret", "client-secret"]) { server in
            let signIn = try await server.issue()
            let printed = ServiceLog()
            let (token, profile) = try await readmeQuickStart(
                storeDirectory: directory, tokenEndpoint: server.tokenEndpoint, signIn: signIn, api: ProfileAPI(),
                printed: printed)
            #expect(token == signIn.accessToken)  // a fresh one-hour token is served as is
            #expect(profile.hasPrefix("profile(at-"))  // the replay, with the refreshed token
            let kinds = printed.all.map { $0.split(separator: " ").first.map(String.init) ?? "" }
            #expect(kinds.first == "current")
            #expect(kinds.filter { $0 == "opened" }.count == 1)  // the sign-in (nothing to restore yet)
            #expect(kinds.filter { $0 == "credentialsRefreshed" }.count == 1)
            #expect(kinds.last == "closed(requested)")
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
