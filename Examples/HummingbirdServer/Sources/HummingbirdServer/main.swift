// HummingbirdServer: a Hummingbird 2 server acting for many users through one UserSessionRegistry.
//
//   HummingbirdServer serve --port 8080 --store /var/lib/app/sessions
//   HummingbirdServer seed --store /var/lib/app/sessions --user alice --refresh-token rt-alice
//
// `serve` answers `GET /me` for the user named by the `X-User-ID` header: it restores the user's session from the
// FileTokenStore (get-or-restore, single-flight), calls the upstream API with the user's access token through
// `withAccessToken` (refresh and replay once on a 401), and maps the package's errors onto HTTP statuses. It logs
// through swift-log and stops gracefully on SIGTERM or SIGINT: the HTTP server first, the registry last.
// `seed` stores a user whose access token has expired, as a sign-in long ago would have: the first request for
// that user refreshes it.
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle
import UserSessions
import UserSessionsLogging
import UserSessionsServiceLifecycle

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The command line: a command, then `--name value` pairs.
struct Arguments {
    var command: String
    var values: [String: String] = [:]

    init(_ arguments: [String]) throws {
        guard let command = arguments.first else { throw UsageError() }
        self.command = command
        var rest = arguments.dropFirst()
        while let name = rest.popFirst() {
            guard name.hasPrefix("--"), let value = rest.popFirst() else { throw UsageError() }
            values[String(name.dropFirst(2))] = value
        }
    }

    func required(_ name: String) throws -> String {
        guard let value = values[name] else { throw UsageError() }
        return value
    }
}

struct UsageError: Error, CustomStringConvertible {
    var description: String {
        "usage: HummingbirdServer serve --port N --store DIR [--host 127.0.0.1]\n"
            + "       HummingbirdServer seed --store DIR --user ID --refresh-token TOKEN"
    }
}

/// The upstream API answered something other than 200.
struct UpstreamError: Error {
    var status: Int
}

/// Calls the upstream API for a user.
struct UpstreamAPI: Sendable {
    let profileURL: URL

    func profile(accessToken: String) async throws -> String {
        var request = URLRequest(url: profileURL)
        request.setValue("Bearer \(accessToken)", forHTTPHeaderField: "Authorization")
        let (data, response) = try await URLSession.shared.data(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard status == 200 else { throw UpstreamError(status: status) }
        return String(decoding: data, as: UTF8.self)
    }
}

func serve(_ arguments: Arguments, logger: Logger) async throws {
    let host = arguments.values["host"] ?? "127.0.0.1"
    guard let port = Int(try arguments.required("port")) else { throw UsageError() }
    let directory = URL(fileURLWithPath: try arguments.required("store"), isDirectory: true)
    guard let base = URL(string: "http://\(host):\(port)") else { throw UsageError() }

    let refresher = try OAuth2TokenRefresher(
        tokenEndpoint: base.appending(path: "oauth/token"),
        clientAuthentication: .publicClient(id: "hummingbird-example"))
    let registry = UserSessionRegistry(
        store: LoggingTokenStore(FileTokenStore(directory: directory), logger: logger), refresher: refresher,
        logger: logger)
    let upstream = UpstreamAPI(profileURL: base.appending(path: "upstream/profile"))

    let router = Router(context: UserRequestContext.self)
    DemoAuthorizationServer().addRoutes(to: router)
    router.group("me").add(middleware: UserSessionMiddleware(registry: registry))
        .get { _, context -> Response in
            let session = try context.requireSession()
            do {
                let profile = try await session.withAccessToken(
                    isAuthenticationFailure: { ($0 as? UpstreamError)?.status == 401 }
                ) { token in
                    try await upstream.profile(accessToken: token)
                }
                return Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: ResponseBody(byteBuffer: ByteBuffer(string: profile)))
            } catch let error as UpstreamError {
                context.logger.warning("upstream refused", metadata: ["status": "\(error.status)"])
                throw HTTPError(.badGateway, message: "the upstream API answered \(error.status)")
            }
        }

    let app = Application(
        router: router, configuration: ApplicationConfiguration(address: .hostname(host, port: port)),
        logger: logger)
    // The registry comes first: a group stops its services in reverse order, so the HTTP server stops taking
    // requests (and finishes the ones in flight) before the registry closes the sessions.
    let group = ServiceGroup(
        configuration: ServiceGroupConfiguration(
            services: [.init(service: registry), .init(service: app)],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger))
    try await group.run()
    logger.info("stopped")
}

func seed(_ arguments: Arguments) async throws {
    let store = FileTokenStore(directory: URL(fileURLWithPath: try arguments.required("store"), isDirectory: true))
    let user = try arguments.required("user")
    let credentials = Credentials(
        accessToken: "at-expired-\(user)", refreshToken: try arguments.required("refresh-token"),
        expiresAt: Date().addingTimeInterval(-60), source: .signIn)
    try await store.save(StoredSession(userInfo: UserInfo(id: user), credentials: credentials), identifier: user)
}

LoggingSystem.bootstrap { label in
    var handler = StreamLogHandler.standardError(label: label)
    handler.logLevel = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap { Logger.Level(rawValue: $0) } ?? .info
    return handler
}
let logger = Logger(label: "HummingbirdServer")
do {
    let arguments = try Arguments(Array(CommandLine.arguments.dropFirst()))
    switch arguments.command {
    case "serve": try await serve(arguments, logger: logger)
    case "seed": try await seed(arguments)
    default: throw UsageError()
    }
} catch let error as UsageError {
    FileHandle.standardError.write(Data("\(error)\n".utf8))
    exit(64)
} catch {
    logger.critical("failed", metadata: ["error": "\(error)"])
    exit(1)
}
