#if Hummingbird
import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import ServiceLifecycle
import UserSessions
import UserSessionsHummingbird

extension WebOverheadServer {
    /// What hummingbird-auth's sessions keep for the signed-in user.
    struct PeerUser: Codable, Sendable {
        var id: String
    }

    /// Serves `route` with Hummingbird until standard input ends.
    static func serveHummingbird(route: Route, store: RecordStore, directory: String?) async throws {
        switch route {
        case .bare:
            let router = Router()
            router.get(RouterPath(path)) { _, _ in "ok" }
            try await runHummingbird(router)
        case .peer:
            let driver = MemoryPersistDriver()
            let router = Router(context: BasicSessionRequestContext<PeerUser, PeerUser>.self)
            router.add(middleware: SessionMiddleware(storage: driver))
            router.get(RouterPath(loginPath)) { _, context in
                context.sessions.createSession(PeerUser(id: "alice"))
                return "ok"
            }
            router.get(RouterPath(path)) { _, context in
                guard context.sessions.session != nil else { throw HTTPError(.unauthorized) }
                return "ok"
            }
            try await runHummingbird(router, services: [driver])
        case .sessions:
            try await withWebSessions(store: store, directory: directory) { sessions in
                let router = Router(context: BasicWebSessionRequestContext.self)
                router.get(RouterPath(loginPath)) { _, _ in
                    let cookie = try await sessions.openBrowserSession(user, replacingCookie: nil)
                    var response = Response(status: .ok)
                    response.headers[.setCookie] = cookie.headerValue
                    return response
                }
                router.group("app").add(middleware: sessions.middleware(.required)).get("me") { _, context in
                    _ = try await context.requireIdentity().controller.accessToken()
                    return "ok"
                }
                try await runHummingbird(router)
            }
        }
    }

    /// Runs `router` on a free port of 127.0.0.1, announces the port, and exits when standard input ends.
    private static func runHummingbird<Context: RequestContext>(
        _ router: Router<Context>, services: [any Service] = []
    ) async throws where Context.Source == ApplicationRequestContextSource {
        let logger = Logger(label: "web-overhead", factory: { _ in SwiftLogNoOpLogHandler() })
        let app = Application(
            router: router, configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0)),
            services: services, onServerRunning: { channel in announce(port: channel.localAddress?.port ?? 0) },
            logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await app.runService(gracefulShutdownSignals: []) }
            group.addTask {
                await untilStandardInputEnds()
                exit(0)
            }
            try await group.next()
            throw BenchmarkError("the Hummingbird server stopped")
        }
    }
}
#endif
