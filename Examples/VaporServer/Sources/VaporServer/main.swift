// VaporServer: a Vapor 4 server whose browsers sign in with OpenID Connect (UserSessionsVapor); the same pages,
// routes and command line as Examples/HummingbirdServer. A target of the root package, built with the `Vapor` trait
// (every file is behind `#if Vapor`; `--postgres-url` needs the `PostgreSQL` trait too):
//
//   swift build --traits Vapor,PostgreSQL --product VaporServer
//
//   VaporServer serve --port P --issuer http://127.0.0.1:OP --client-id example-app \
//       --client-secret example-secret --public-url http://127.0.0.1:P --upstream http://127.0.0.1:OP/api \
//       [--postgres-url postgres://user@127.0.0.1:5432/db]   (a fleet shares browsers, tokens and sign-ins)
//       [--store DIR]                                       (otherwise files under DIR; without either: memory)
//       [--sign-in-key BASE64]    (32 bytes sealing the pending sign-ins browsers keep; a fleet shares one)
//
// The FAPI 2.0 Security Profile instead of `--client-secret`: `--fapi-client-key FILE --fapi-client-key-id KID`,
// the client's ES256 private key (PEM) and the kid the provider knows its public key by. The client then
// authenticates with private_key_jwt (assertions addressed to the issuer), pushes its authorization requests (PAR)
// and gets DPoP-bound tokens: the proxy sends them upstream as `Authorization: DPoP`, each with a fresh `DPoP` proof.
//
// The browser holds an opaque cookie; the tokens stay on the server. `/` shows the signed-in user (from `req.auth`)
// and calls the upstream API through the token-forwarding proxy at `/upstream`; `/auth/…` signs in and out. It
// listens on 127.0.0.1 only, logs to stderr (never a cookie value or a token), prints `listening on <url>` on stdout
// when ready, and stops gracefully on SIGTERM or SIGINT: the HTTP server first, the registry last.
#if Vapor
import Foundation
import Logging
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsVapor
import Vapor

#if Logging
import UserSessionsLogging
#endif
#if PostgreSQL
import PostgresNIO
import UserSessionsPostgres
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

    func url(_ name: String) throws -> URL {
        guard let url = URL(string: try required(name)), url.host != nil else { throw UsageError() }
        return url
    }
}

struct UsageError: Error, CustomStringConvertible {
    var description: String {
        "usage: VaporServer serve --port P --issuer URL --client-id ID "
            + "(--client-secret SECRET | --fapi-client-key FILE --fapi-client-key-id KID) "
            + "--public-url URL --upstream URL [--postgres-url URL | --store DIR] [--sign-in-key BASE64]"
    }
}

/// Where tokens, pending sign-ins and browser records are kept.
struct Stores {
    var tokens: any TokenStore
    var signIns: any OpenIDConnectStateStore
    var browsers: any WebSessionStore
    /// Runs the PostgreSQL client while serving, if there is one.
    var run: (@Sendable () async -> Void)?

    init(_ arguments: Arguments, logger: Logger) throws {
        if let postgres = arguments.values["postgres-url"] {
            #if PostgreSQL
            guard let url = URLComponents(string: postgres), let host = url.host else { throw UsageError() }
            let client = PostgresClient(
                configuration: PostgresClient.Configuration(
                    host: host, port: url.port ?? 5432, username: url.user ?? "postgres", password: url.password,
                    database: String(url.path.dropFirst()), tls: .disable),
                backgroundLogger: logger)
            tokens = try PostgresTokenStore(client: client, namespace: "example")
            signIns = try PostgresOpenIDConnectStateStore(client: client, namespace: "example")
            browsers = try PostgresWebSessionStore(client: client, namespace: "example")
            run = { await client.run() }
            #else
            _ = postgres
            throw UsageError()
            #endif
        } else if let directory = arguments.values["store"] {
            let root = URL(fileURLWithPath: directory, isDirectory: true)
            tokens = FileTokenStore(directory: root.appending(path: "tokens"))
            signIns = FileOpenIDConnectStateStore(directory: root.appending(path: "sign-ins"))
            browsers = FileWebSessionStore(directory: root.appending(path: "browsers"))
        } else {
            tokens = InMemoryTokenStore()
            signIns = InMemoryOpenIDConnectStateStore()
            browsers = InMemoryWebSessionStore()
        }
    }
}

/// The client's registration: a client secret (`client_secret_basic`), or with `--fapi-client-key` the FAPI 2.0
/// profile: `private_key_jwt` with that ES256 key, DPoP-bound tokens and pushed authorization requests.
func openIDConfiguration(
    _ arguments: Arguments, issuer: URL, redirectURI: URL, signInKeys: PendingSignInKeys
) throws -> OpenIDConnectConfiguration {
    let id = try arguments.required("client-id")
    let scopes = ["openid", "profile", "email", "offline_access"]
    let values = arguments.values
    switch (values["client-secret"], values["fapi-client-key"], values["fapi-client-key-id"]) {
    case (let secret?, nil, nil):
        return OpenIDConnectConfiguration(
            clientAuthentication: .clientSecretBasic(id: id, secret: secret), redirectURI: redirectURI,
            scopes: scopes, pendingSignInKeys: signInKeys)
    case (nil, let file?, let keyID?):
        let signer = try PrivateKeyJWTSigner(
            pem: try String(contentsOfFile: file, encoding: .utf8), algorithm: .es256, keyID: keyID)
        return OpenIDConnectConfiguration(
            clientAuthentication: .privateKeyJWT(id: id, audience: .issuer(issuer.absoluteString), signer: signer),
            redirectURI: redirectURI, scopes: scopes, pendingSignInKeys: signInKeys,
            dpop: DPoPProofs(signer: DPoPSigner()), profile: .fapi2)
    default:
        throw UsageError()
    }
}

/// The example's routes: the sign-in routes, the post-logout page, the signed-in home page and the proxy.
func configure(_ app: Application, sessions: WebSessions, upstream: URL) throws {
    app.middleware.use(sessions.securityHeadersMiddleware(), at: .beginning)
    app.middleware.use(sessions.crossSiteRequestMiddleware())
    sessions.addRoutes(to: app)
    app.get("signed-out") { request -> Response in
        // The provider sends the browser back with the state `POST /auth/logout` sent; a link from elsewhere has
        // none.
        Page.signedOut(confirmed: (try? sessions.verifyPostLogoutState(request)) != nil)
    }
    app.grouped(sessions.middleware(.required)).get { request -> Response in
        let user = try request.auth.require(WebSession.self).record
        return Page.home(name: user.claims["name"] ?? user.subject, subject: user.subject)
    }
    sessions.addProxy(try TokenForwardingProxy(upstream: upstream), at: "/upstream", to: app)
}

/// Waits for SIGTERM or SIGINT.
func terminationSignal() async {
    let (signals, continuation) = AsyncStream<Void>.makeStream()
    var sources: [any DispatchSourceSignal] = []
    for number in [SIGTERM, SIGINT] {
        signal(number, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
        source.setEventHandler { continuation.yield() }
        source.resume()
        sources.append(source)
    }
    for await _ in signals { break }
    for source in sources { source.cancel() }
}

func serve(_ arguments: Arguments, logger: Logger) async throws {
    guard let port = Int(try arguments.required("port")) else { throw UsageError() }
    let stores = try Stores(arguments, logger: logger)
    let configuration = WebSessionConfiguration(
        publicURL: try arguments.url("public-url"), postLogoutRedirectPath: "/signed-out")
    // Pending sign-ins live sealed in the browser that started them; every instance must open them.
    var signInKeys = PendingSignInKeys.random()
    if let key = arguments.values["sign-in-key"] {
        guard let bytes = Data(base64Encoded: key) else { throw UsageError() }
        signInKeys = try PendingSignInKeys(current: bytes)
    }
    let issuer = try arguments.url("issuer")
    let openID = try OpenIDConnectClient(
        issuer: issuer,
        configuration: try openIDConfiguration(
            arguments, issuer: issuer, redirectURI: configuration.callbackURL, signInKeys: signInKeys),
        stateStore: stores.signIns)

    try await withThrowingTaskGroup(of: Void.self) { tasks in
        if let run = stores.run { tasks.addTask { await run() } }
        // Refreshes check the ID token a refresh response carries (OpenID Connect Core §12.2).
        let refresher = try await openID.tokenRefresher()
        #if Logging
        let registry = UserSessionRegistry(store: stores.tokens, refresher: refresher, logger: logger)
        #else
        let registry = UserSessionRegistry(store: stores.tokens, refresher: refresher)
        #endif
        let sessions = try WebSessions(
            openID: openID, registry: registry, store: stores.browsers, configuration: configuration, logger: logger)

        // Vapor's own command line is not used: the example's arguments are its contract.
        let app = try await Application.make(Environment(name: "production", arguments: ["VaporServer"]))
        app.logger = logger
        do {
            try configure(app, sessions: sessions, upstream: try arguments.url("upstream"))
            try await app.server.start(address: .hostname("127.0.0.1", port: port))
            FileHandle.standardOutput.write(Data("listening on http://127.0.0.1:\(port)\n".utf8))
            await terminationSignal()
        } catch {
            await app.server.shutdown()
            await registry.shutdown()
            try? await app.asyncShutdown()
            throw error
        }
        // The HTTP server stops taking requests (and finishes the ones in flight) before the registry closes the
        // sessions; the PostgreSQL client stops last.
        await app.server.shutdown()
        await registry.shutdown()
        try await app.asyncShutdown()
        tasks.cancelAll()
    }
    logger.info("stopped")
}

LoggingSystem.bootstrap { label in
    var handler = StreamLogHandler.standardError(label: label)
    handler.logLevel = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap { Logger.Level(rawValue: $0) } ?? .info
    return handler
}
let logger = Logger(label: "VaporServer")
do {
    let arguments = try Arguments(Array(CommandLine.arguments.dropFirst()))
    guard arguments.command == "serve" else { throw UsageError() }
    try await serve(arguments, logger: logger)
} catch let error as UsageError {
    FileHandle.standardError.write(Data("\(error)\n".utf8))
    exit(64)
} catch {
    logger.critical("failed", metadata: ["error": "\(error)"])
    exit(1)
}
#endif
