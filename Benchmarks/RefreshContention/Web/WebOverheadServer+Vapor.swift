#if Vapor
import Foundation
import UserSessions
import UserSessionsVapor
import Vapor

extension WebOverheadServer {
    /// Serves `route` with Vapor until standard input ends.
    static func serveVapor(route: Route, store: RecordStore, directory: String?) async throws {
        switch route {
        case .bare:
            try await runVapor { app in
                app.get("app", "me") { _ async in "ok" }
            }
        case .peer:
            try await runVapor { app in
                app.sessions.use(.memory)
                let sessions = app.grouped(app.sessions.middleware)
                sessions.get("bench", "login") { request async in
                    request.session.data["user"] = "alice"
                    return "ok"
                }
                sessions.get("app", "me") { request async throws in
                    guard request.session.data["user"] != nil else { throw Abort(.unauthorized) }
                    return "ok"
                }
            }
        case .sessions:
            try await withWebSessions(store: store, directory: directory) { sessions in
                try await runVapor { app in
                    app.get("bench", "login") { _ async throws -> Response in
                        let cookie = try await sessions.openBrowserSession(user, replacingCookie: nil)
                        let response = Response(status: .ok, body: "ok")
                        response.headers.replaceOrAdd(name: .setCookie, value: cookie.headerValue)
                        return response
                    }
                    app.grouped("app").grouped(sessions.middleware(.required)).get("me") {
                        request async throws -> String in
                        _ = try await request.auth.require(WebSession.self).controller.accessToken()
                        return "ok"
                    }
                }
            }
        }
    }

    /// Runs an application `configure` sets up on a free port of 127.0.0.1, announces the port, and exits when
    /// standard input ends. The environment is production's, read from no command line.
    private static func runVapor(_ configure: (Application) throws -> Void) async throws {
        let app = try await Application.make(Environment(name: "production", arguments: ["web-overhead"]))
        app.logger.logLevel = .error
        try configure(app)
        try await app.server.start(address: .hostname("127.0.0.1", port: 0))
        guard let port = app.http.server.shared.localAddress?.port else {
            throw BenchmarkError("the Vapor server has no port")
        }
        announce(port: port)
        await untilStandardInputEnds()
        exit(0)
    }
}
#endif
