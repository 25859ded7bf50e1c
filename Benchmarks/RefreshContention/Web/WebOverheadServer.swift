#if Hummingbird || Vapor
import Foundation
import Logging
import UserSessions
import UserSessionsOpenIDConnect

#if Hummingbird
import UserSessionsHummingbird
#else
import UserSessionsVapor
#endif

#if PostgreSQL
import PostgresNIO
#endif

/// The server side of the web request overhead workload (``WebOverheadWorkload``): one framework serving one kind
/// of route over one record store on a free port of 127.0.0.1. It prints the port on a line of its own, serves
/// until its standard input ends (the workload closes it, or dies), then shuts down.
///
/// Every kind of route answers `GET /app/me` with `ok` from an `async` handler (the route of a signed-in user awaits
/// its token; Vapor runs a synchronous handler without a task, which would flatter the floor):
/// - `bare`: no session at all (the floor);
/// - `peer`: the framework's own sessions (hummingbird-auth's `SessionMiddleware` over its in-memory driver, or
///   Vapor's `SessionsMiddleware` over its in-memory driver), answering 401 without one;
/// - `sessions`: this package's session middleware, `.required`, whose route asks the user's controller for a
///   fresh access token: cookie → record → session → token.
///
/// `GET /bench/login` signs the one user in (through the framework's sessions or `WebSessions.openBrowserSession`)
/// and answers with the session cookie.
enum WebOverheadServer {
    static let flag = "--web-server"

    enum Framework: String, CaseIterable, Sendable {
        case hummingbird = "Hummingbird"
        case vapor = "Vapor"

        /// The frameworks this build has a trait for.
        static var built: [Framework] {
            var frameworks: [Framework] = []
            #if Hummingbird
            frameworks.append(.hummingbird)
            #endif
            #if Vapor
            frameworks.append(.vapor)
            #endif
            return frameworks
        }
    }

    enum Route: String, Sendable {
        case bare, peer, sessions
    }

    enum RecordStore: String, CaseIterable, Sendable {
        case memory, file, postgres
    }

    /// The path wrk requests, and the path that signs the user in.
    static let path = "/app/me"
    static let loginPath = "/bench/login"

    /// `--web-server FRAMEWORK ROUTE STORE [DIRECTORY]`.
    static func main(arguments: [String]) async -> Int32 {
        guard arguments.count >= 3, let framework = Framework(rawValue: arguments[0]),
            let route = Route(rawValue: arguments[1]), let store = RecordStore(rawValue: arguments[2])
        else {
            Progress.note("usage: RefreshContention \(flag) FRAMEWORK bare|peer|sessions memory|file|postgres [DIR]")
            return 64
        }
        let directory = arguments.count > 3 ? arguments[3] : nil
        do {
            switch framework {
            case .hummingbird:
                #if Hummingbird
                try await serveHummingbird(route: route, store: store, directory: directory)
                #else
                throw BenchmarkError("built without the Hummingbird trait")
                #endif
            case .vapor:
                #if Vapor
                try await serveVapor(route: route, store: store, directory: directory)
                #else
                throw BenchmarkError("built without the Vapor trait")
                #endif
            }
            return 0
        } catch {
            Progress.note("web server: \(error)")
            return 2
        }
    }

    /// Tells the workload the port the server listens on.
    static func announce(port: Int) {
        FileHandle.standardOutput.write(Data("\(port)\n".utf8))
    }

    /// Returns when standard input ends: the workload closed it, or it exited.
    static func untilStandardInputEnds() async {
        await Task.detached { _ = FileHandle.standardInput.readDataToEndOfFile() }.value
    }

    /// The signed-in user: tokens fresh for an hour, so no request of the run refreshes.
    static var user: UserSessionPrototype {
        UserSessionPrototype(
            identifier: "alice", userInfo: UserInfo(id: "alice", email: "alice@example.com", name: "Alice"),
            credentials: Credentials(
                accessToken: "bench-access-token", refreshToken: "bench-refresh-token",
                expiresAt: Date(timeIntervalSinceNow: 3600)))
    }

    /// Runs `body` with web sessions over `store` (a registry with an in-memory token store and no refresher; a
    /// provider that is never contacted), shutting the registry down after.
    static func withWebSessions<R: Sendable>(
        store: RecordStore, directory: String?, _ body: (WebSessions) async throws -> R
    ) async throws -> R {
        guard let base = URL(string: "http://127.0.0.1:8080"), let unused = URL(string: "http://127.0.0.1:9") else {
            throw BenchmarkError("bad fixed URL")
        }
        let registry = UserSessionRegistry(store: InMemoryTokenStore(), refresher: nil)
        defer { Task { await registry.shutdown() } }
        let openID = try OpenIDConnectClient(
            issuer: unused,
            configuration: OpenIDConnectConfiguration(
                clientAuthentication: .clientSecretBasic(id: "bench", secret: "bench-secret"),
                redirectURI: base.appending(path: "auth/callback")))
        let configuration = WebSessionConfiguration(publicURL: base)
        func sessions(_ records: any WebSessionStore) throws -> WebSessions {
            try WebSessions(
                openID: openID, registry: registry, store: records, configuration: configuration,
                logger: Logger(label: "web-overhead", factory: { _ in SwiftLogNoOpLogHandler() }))
        }
        switch store {
        case .memory:
            return try await body(sessions(InMemoryWebSessionStore()))
        case .file:
            guard let directory else { throw BenchmarkError("the file store needs a directory") }
            return try await body(sessions(FileWebSessionStore(directory: URL(fileURLWithPath: directory))))
        case .postgres:
            #if PostgreSQL
            let client = try FleetStore.postgresClient(maximumConnections: 8)
            return try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                let records = try PostgresWebSessionStore(client: client, namespace: "bench_web")
                try await records.prepare()
                return try await body(sessions(records))
            }
            #else
            throw BenchmarkError("built without the PostgreSQL trait")
            #endif
        }
    }
}
#endif
