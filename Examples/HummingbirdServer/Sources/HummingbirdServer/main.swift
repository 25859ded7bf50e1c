// HummingbirdServer: a Hummingbird 2 server whose browsers sign in with OpenID Connect (UserSessionsHummingbird).
//
//   HummingbirdServer serve --port P --issuer http://127.0.0.1:OP --client-id example-app \
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
// The browser holds an opaque cookie; the tokens stay on the server. `/` shows the signed-in user and calls the
// upstream API through the token-forwarding proxy at `/upstream`; `/auth/…` signs in and out. It listens on
// 127.0.0.1 only, logs to stderr (never a cookie value or a token), prints `listening on <url>` on stdout when
// ready, and stops gracefully on SIGTERM or SIGINT: the HTTP server first, the registry last.
//
// This file is built by Package.swift beside Sources/, and also by the root package as its HummingbirdExample
// target (CI's every-trait build), which defines BUILT_BY_ROOT_PACKAGE: there it needs the four traits it uses.
#if !BUILT_BY_ROOT_PACKAGE || (Hummingbird && PostgreSQL && Logging && ServiceLifecycle)
import Foundation
import Hummingbird
import Logging
import PostgresNIO
import ServiceLifecycle
import UserSessions
import UserSessionsHummingbird
import UserSessionsLogging
import UserSessionsOpenIDConnect
import UserSessionsPostgres
import UserSessionsServiceLifecycle

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
        "usage: HummingbirdServer serve --port P --issuer URL --client-id ID "
            + "(--client-secret SECRET | --fapi-client-key FILE --fapi-client-key-id KID) "
            + "--public-url URL --upstream URL [--postgres-url URL | --store DIR] [--sign-in-key BASE64]"
    }
}

/// Where tokens, pending sign-ins and browser records are kept.
struct Stores {
    var tokens: any TokenStore
    var signIns: any OpenIDConnectStateStore
    var browsers: any WebSessionStore
    var services: [any Service] = []

    init(_ arguments: Arguments, logger: Logger) throws {
        if let postgres = arguments.values["postgres-url"] {
            guard let url = URLComponents(string: postgres), let host = url.host else { throw UsageError() }
            let client = PostgresClient(
                configuration: PostgresClient.Configuration(
                    host: host, port: url.port ?? 5432, username: url.user ?? "postgres", password: url.password,
                    database: String(url.path.dropFirst()), tls: .disable),
                backgroundLogger: logger)
            tokens = try PostgresTokenStore(client: client, namespace: "example")
            signIns = try PostgresOpenIDConnectStateStore(client: client, namespace: "example")
            browsers = try PostgresWebSessionStore(client: client, namespace: "example")
            services = [client]
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
    // Refreshes check the ID token a refresh response carries (OpenID Connect Core §12.2).
    let refresher = try await openID.tokenRefresher()
    // The store is not wrapped in a LoggingTokenStore: the PostgreSQL store's coordination (refresh leases, change
    // notifications to the other instances) must reach the registry.
    let registry = UserSessionRegistry(store: stores.tokens, refresher: refresher, logger: logger)
    let sessions = try WebSessions(
        openID: openID, registry: registry, store: stores.browsers, configuration: configuration, logger: logger)

    let router = Router(context: BasicWebSessionRequestContext.self)
    router.add(middleware: sessions.securityHeadersMiddleware())
    router.add(middleware: sessions.crossSiteRequestMiddleware())
    sessions.addRoutes(to: router)
    router.get("signed-out") { request, _ in
        // The provider sends the browser back with the state `POST /auth/logout` sent; a link from elsewhere has
        // none.
        Page.signedOut(confirmed: (try? sessions.verifyPostLogoutState(request)) != nil)
    }
    router.group().add(middleware: sessions.middleware(.required))
        .get("/") { _, context in
            let user = try context.requireIdentity().record
            return Page.home(name: user.claims["name"] ?? user.subject, subject: user.subject)
        }
    sessions.addProxy(try TokenForwardingProxy(upstream: try arguments.url("upstream")), at: "/upstream", to: router)

    let app = Application(
        router: router, configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: port)),
        onServerRunning: { _ in
            FileHandle.standardOutput.write(Data("listening on http://127.0.0.1:\(port)\n".utf8))
        },
        logger: logger)
    // The stores' services and the registry come first: a group stops its services in reverse order, so the HTTP
    // server stops taking requests (and finishes the ones in flight) before the registry closes the sessions.
    let group = ServiceGroup(
        configuration: ServiceGroupConfiguration(
            services: stores.services.map { .init(service: $0) } + [.init(service: registry), .init(service: app)],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger))
    try await group.run()
    logger.info("stopped")
}

LoggingSystem.bootstrap { label in
    var handler = StreamLogHandler.standardError(label: label)
    handler.logLevel = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap { Logger.Level(rawValue: $0) } ?? .info
    return handler
}
let logger = Logger(label: "HummingbirdServer")
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
