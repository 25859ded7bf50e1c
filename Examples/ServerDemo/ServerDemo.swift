// ServerDemo: a process acting for several users at once.
//
// It wires a UserSessionRegistry to a FileTokenStore in a temporary directory and to a simulated OAuth token
// endpoint living in this process, sends concurrent "API requests" for every user through the replay helper,
// prints every session event as it happens, and shuts down cleanly.
import Foundation
import Synchronization
import UserSessions

/// A token endpoint simulated in-process: it rotates refresh tokens on every use and counts the grants.
final class SimulatedTokenEndpoint: TokenRefresher {
    private struct State {
        var issued = 0
        var validRefreshTokens: Set<String> = []
    }
    private let state = Mutex(State())
    let tokenLifetime: TimeInterval

    init(tokenLifetime: TimeInterval) {
        self.tokenLifetime = tokenLifetime
    }

    /// Issues the first credentials of a user, as a sign-in would.
    func signIn(user: String) -> Credentials {
        state.withLock { state in
            state.issued += 1
            let refreshToken = "refresh-\(user)-\(state.issued)"
            state.validRefreshTokens.insert(refreshToken)
            return Credentials(
                accessToken: "access-\(user)-\(state.issued)", refreshToken: refreshToken,
                expiresAt: Date().addingTimeInterval(tokenLifetime), lastRefreshedAt: Date(), source: .signIn,
                grantedPermissions: ["profile"])
        }
    }

    func refresh(_ credentials: Credentials) async throws -> Credentials {
        try await Task.sleep(for: .milliseconds(20))  // the network
        return try state.withLock { state in
            guard let old = credentials.refreshToken, state.validRefreshTokens.remove(old) != nil else {
                throw UserSessionError(.refreshFailed, "invalid_grant", failureClass: .terminal)
            }
            state.issued += 1
            let user = old.split(separator: "-")[1]
            let refreshToken = "refresh-\(user)-\(state.issued)"
            state.validRefreshTokens.insert(refreshToken)
            var next = credentials
            next.accessToken = "access-\(user)-\(state.issued)"
            next.refreshToken = refreshToken
            next.expiresAt = Date().addingTimeInterval(tokenLifetime)
            next.lastRefreshedAt = Date()
            next.source = .refresh
            return next
        }
    }

    var grants: Int { state.withLock { $0.issued } }
}

/// The API the server calls on behalf of its users: it answers 401 ("unauthorized") for revoked access tokens.
final class SimulatedAPI: Sendable {
    struct Unauthorized: Error {}
    private let revokedTokens = Mutex<Set<String>>([])
    private let unauthorizedAnswers = Atomic<Int>(0)
    private let servedAnswers = Atomic<Int>(0)

    func revoke(_ token: String) {
        revokedTokens.withLock { _ = $0.insert(token) }
    }

    func fetchProfile(token: String) async throws -> String {
        if revokedTokens.withLock({ $0.contains(token) }) {
            unauthorizedAnswers.add(1, ordering: .relaxed)
            throw Unauthorized()
        }
        servedAnswers.add(1, ordering: .relaxed)
        return "profile for \(token.split(separator: "-")[1])"
    }

    var servedCount: Int { servedAnswers.load(ordering: .relaxed) }
    var unauthorizedCount: Int { unauthorizedAnswers.load(ordering: .relaxed) }
}

@main
struct ServerDemo {
    static func main() async throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("user-sessions-demo-\(ProcessInfo.processInfo.processIdentifier)")
        defer { try? FileManager.default.removeItem(at: directory) }

        let endpoint = SimulatedTokenEndpoint(tokenLifetime: 1.5)
        let registry = UserSessionRegistry(
            store: FileTokenStore(directory: directory.appendingPathComponent("tokens")),
            refresher: endpoint,
            configuration: .init(
                refreshLeadTime: .milliseconds(500), proactiveRefreshWindow: .milliseconds(800),
                refreshLoopPolicy: .init(maximumRefreshes: 20, window: .seconds(30)),
                dataDirectories: SessionDirectories(root: directory.appendingPathComponent("data"))))
        let api = SimulatedAPI()
        let users = ["ada", "grace", "linus"]

        print("== opening sessions for \(users.joined(separator: ", "))")
        var printers: [Task<Void, Never>] = []
        for user in users {
            let controller = try await registry.open(
                UserSessionPrototype(
                    userInfo: UserInfo(id: user, name: user.capitalized),
                    credentials: endpoint.signIn(user: user)))
            let events = controller.events()
            printers.append(
                Task {
                    for await event in events {
                        print("  [\(user)] #\(event.sequence) \(event.kind) -> \(event.session.state)")
                    }
                })
        }

        print("== 3 seconds of concurrent requests (tokens live 1.5 s)")
        let deadline = ContinuousClock.now.advanced(by: .seconds(3))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for user in users {
                let controller = try registry.controller(for: user)
                for _ in 0..<8 {
                    group.addTask {
                        while ContinuousClock.now < deadline {
                            _ = try await controller.withAccessToken(
                                isAuthenticationFailure: { $0 is SimulatedAPI.Unauthorized }
                            ) { token in try await api.fetchProfile(token: token) }
                            try await Task.sleep(for: .milliseconds(5))
                        }
                    }
                }
            }
            // Midway, the API starts rejecting grace's current token: the replay helper refreshes once and replays.
            group.addTask {
                try await Task.sleep(for: .seconds(1))
                let controller = try registry.controller(for: "grace")
                if let token = controller.credentials?.accessToken {
                    print("== the API revokes grace's current access token")
                    api.revoke(token)
                }
            }
            try await group.waitForAll()
        }
        print(
            "== served \(api.servedCount) requests; \(endpoint.grants - users.count) refreshes;",
            "\(api.unauthorizedCount) answered 401 and were replayed")
        print("== stored identifiers: \(try await registry.storedIdentifiers())")

        print("== linus signs out and clears his data; the others shut down")
        try await registry.closeAndClear(identifier: "linus")
        await registry.shutdown()
        for printer in printers { await printer.value }
        print("== stored identifiers after shutdown: \(try await registry.storedIdentifiers())")
        print("== done")
    }
}
