// swift-tools-version:6.2
import PackageDescription

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

// Optional integrations are package traits, all off by default: with default traits the package resolves, fetches
// and builds no other package (SwiftPM leaves out a dependency whose every use is behind a disabled trait). Each
// integration lives in its own target and product, so the core module never imports anything.
//
// Enable them where you depend on the package:
//     .package(url: "https://github.com/…/swift-user-sessions", from: "…", traits: ["Logging", "Metrics"])
// and on the command line with `--traits Logging,Metrics,ServiceLifecycle` or `--enable-all-traits`.
let traits: Set<Trait> = [
    .trait(name: "Logging", description: "UserSessionsLogging: swift-log for controllers, registries and stores."),
    .trait(name: "Metrics", description: "UserSessionsMetrics: swift-metrics counters, a timer and a gauge."),
    .trait(
        name: "ServiceLifecycle",
        description: "UserSessionsServiceLifecycle: run a registry or a controller in a ServiceGroup."
    ),
    .trait(
        name: "AsyncHTTPClient",
        description: "UserSessionsAsyncHTTPClient: an AsyncHTTPClient transport for the refresher and the remote store."
    ),
    .trait(
        name: "PostgreSQL",
        description: "UserSessionsPostgres: a PostgresNIO token store shared by a fleet of server instances."
    ),
    .trait(
        name: "Sealing",
        description: "UserSessionsSealing: any token store keeps its tokens sealed with AES-256-GCM (swift-crypto)."
    ),
    .trait(
        name: "OpenIDConnect",
        description: "UserSessionsOpenIDConnect: sign-in and sign-out with OpenID Connect (jwt-kit verifies tokens)."
    ),
    .trait(
        name: "Hummingbird",
        description:
            "UserSessionsHummingbird: web sessions for Hummingbird 2 (cookie, sign-in routes, middleware, proxy, CSRF).",
        enabledTraits: ["OpenIDConnect"]
    ),
    .trait(
        name: "Vapor",
        description:
            "UserSessionsVapor: web sessions for Vapor 4 (cookie, sign-in routes, middleware, proxy, CSRF).",
        enabledTraits: ["OpenIDConnect"]
    ),
    .trait(
        name: "Tracing",
        description:
            "UserSessionsTracing: swift-distributed-tracing spans for refreshes, restores, store calls and remote calls."
    ),
]

// CI and documentation builds may switch every trait on with ENABLE_ALL_TRAITS=1 (same as `--enable-all-traits`).
let enableAllTraits = ProcessInfo.processInfo.environment["ENABLE_ALL_TRAITS"] != nil
let defaultTraits: Set<String> = enableAllTraits ? Set(traits.map(\.name)) : []

let package = Package(
    name: "swift-user-sessions",
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11)],
    products: [
        .library(name: "UserSessions", targets: ["UserSessions"]),
        .library(name: "UserSessionsLogging", targets: ["UserSessionsLogging"]),
        .library(name: "UserSessionsMetrics", targets: ["UserSessionsMetrics"]),
        .library(name: "UserSessionsServiceLifecycle", targets: ["UserSessionsServiceLifecycle"]),
        .library(name: "UserSessionsAsyncHTTPClient", targets: ["UserSessionsAsyncHTTPClient"]),
        .library(name: "UserSessionsPostgres", targets: ["UserSessionsPostgres"]),
        .library(name: "UserSessionsSealing", targets: ["UserSessionsSealing"]),
        .library(name: "UserSessionsOpenIDConnect", targets: ["UserSessionsOpenIDConnect"]),
        .library(name: "UserSessionsHummingbird", targets: ["UserSessionsHummingbird"]),
        .library(name: "UserSessionsWeb", targets: ["UserSessionsWeb"]),
        .library(name: "UserSessionsVapor", targets: ["UserSessionsVapor"]),
        .library(name: "UserSessionsTracing", targets: ["UserSessionsTracing"]),
    ],
    traits: traits.union([.default(enabledTraits: defaultTraits)]),
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.7.1"),
        // 4.x and 5.x: the range vapor/jwt-kit 5.8 accepts as well, so both traits resolve one swift-crypto.
        .package(url: "https://github.com/apple/swift-crypto", "4.0.0"..<"6.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth", from: "2.5.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.4.0"),
        .package(url: "https://github.com/vapor/vapor", from: "4.122.3"),
        // hummingbird 2.28.1 asks for 1.6.0 or later too, so both traits resolve one swift-distributed-tracing.
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.6.0"),
    ],
    targets: [
        .target(name: "UserSessions"),
        .target(
            name: "UserSessionsLogging",
            dependencies: [
                "UserSessions",
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Logging"])),
            ]
        ),
        .target(
            name: "UserSessionsMetrics",
            dependencies: [
                "UserSessions",
                .product(name: "CoreMetrics", package: "swift-metrics", condition: .when(traits: ["Metrics"])),
            ]
        ),
        .target(
            name: "UserSessionsServiceLifecycle",
            dependencies: [
                "UserSessions",
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle",
                    condition: .when(traits: ["ServiceLifecycle"])),
            ]
        ),
        .target(
            name: "UserSessionsAsyncHTTPClient",
            dependencies: [
                "UserSessions",
                .product(
                    name: "AsyncHTTPClient", package: "async-http-client",
                    condition: .when(traits: ["AsyncHTTPClient"])),
            ]
        ),
        .target(
            name: "UserSessionsPostgres",
            dependencies: [
                "UserSessions",
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["PostgreSQL"])),
            ]
        ),
        .target(
            name: "UserSessionsSealing",
            dependencies: [
                "UserSessions",
                .product(name: "Crypto", package: "swift-crypto", condition: .when(traits: ["Sealing"])),
            ]
        ),
        // Sign-in and sign-out with OpenID Connect. Its state store on PostgreSQL builds only when the PostgreSQL
        // trait is on too (`#if OpenIDConnect && PostgreSQL` in the target).
        .target(
            name: "UserSessionsOpenIDConnect",
            dependencies: [
                "UserSessions",
                .product(name: "JWTKit", package: "jwt-kit", condition: .when(traits: ["OpenIDConnect"])),
                .product(name: "Crypto", package: "swift-crypto", condition: .when(traits: ["OpenIDConnect"])),
                // RSA DPoP keys (RS256) are made with swift-crypto's RSA, which lives there.
                .product(name: "_CryptoExtras", package: "swift-crypto", condition: .when(traits: ["OpenIDConnect"])),
                .target(name: "UserSessionsPostgres", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["PostgreSQL"])),
            ]
        ),
        // The framework-neutral web-session layer both adapters share: browser records and their stores, the cookie,
        // the CSRF check, the proxy's rules and the routes' behaviour as framework-free requests and responses. It
        // builds when either web trait is on (`#if Hummingbird || Vapor` in the target); its browser-record store on
        // PostgreSQL only when the PostgreSQL trait is on too.
        .target(
            name: "UserSessionsWeb",
            dependencies: [
                "UserSessions",
                "UserSessionsOpenIDConnect",
                .product(
                    name: "HTTPTypes", package: "swift-http-types", condition: .when(traits: ["Hummingbird", "Vapor"])),
                .product(name: "Crypto", package: "swift-crypto", condition: .when(traits: ["Hummingbird", "Vapor"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Hummingbird", "Vapor"])),
                .target(name: "UserSessionsPostgres", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
                // The proxy's span (TokenForwardingProxy+Tracing.swift), for both adapters.
                .target(name: "UserSessionsTracing", condition: .when(traits: ["Tracing"])),
            ]
        ),
        // Web sessions for Hummingbird 2: a thin adapter over UserSessionsWeb (routes, middleware, proxy mount).
        .target(
            name: "UserSessionsHummingbird",
            dependencies: [
                "UserSessions",
                "UserSessionsOpenIDConnect",
                "UserSessionsWeb",
                .product(name: "Hummingbird", package: "hummingbird", condition: .when(traits: ["Hummingbird"])),
                .product(
                    name: "HummingbirdAuth", package: "hummingbird-auth", condition: .when(traits: ["Hummingbird"])),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: .when(traits: ["Hummingbird"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Hummingbird"])),
            ]
        ),
        // Spans for refreshes, restores, store calls and remote calls; the core's seam is UserSessionInstrumentation.
        .target(
            name: "UserSessionsTracing",
            dependencies: [
                "UserSessions",
                .product(name: "Tracing", package: "swift-distributed-tracing", condition: .when(traits: ["Tracing"])),
            ]
        ),
        // Web sessions for Vapor 4: a thin adapter over UserSessionsWeb (routes, a middleware filling `req.auth`,
        // the proxy mount).
        .target(
            name: "UserSessionsVapor",
            dependencies: [
                "UserSessions",
                "UserSessionsOpenIDConnect",
                "UserSessionsWeb",
                .product(name: "Vapor", package: "vapor", condition: .when(traits: ["Vapor"])),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: .when(traits: ["Vapor"])),
            ]
        ),
        .executableTarget(
            name: "RefreshContention",
            dependencies: [
                "UserSessions",
                "UserSessionsAsyncHTTPClient",
                "UserSessionsTestSupport",
                .product(
                    name: "AsyncHTTPClient", package: "async-http-client",
                    condition: .when(traits: ["AsyncHTTPClient"])),
                // The fleet workload's `postgres` rows; without the trait the target builds no other package.
                .target(name: "UserSessionsPostgres", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
                .product(
                    name: "Logging", package: "swift-log", condition: .when(traits: ["PostgreSQL", "Hummingbird", "Vapor"])),
                // The sealing workload's rows; without the trait the target builds no other package.
                .target(name: "UserSessionsSealing", condition: .when(traits: ["Sealing"])),
                // The private_key_jwt workload's rows (an ES256 assertion per token request).
                .target(name: "UserSessionsOpenIDConnect", condition: .when(traits: ["OpenIDConnect"])),
                .product(
                    name: "Crypto", package: "swift-crypto", condition: .when(traits: ["OpenIDConnect", "Sealing"])),
                // The callback-validation workload's rows (keys and ID tokens made with jwt-kit).
                .product(name: "JWTKit", package: "jwt-kit", condition: .when(traits: ["OpenIDConnect"])),
                .product(name: "_CryptoExtras", package: "swift-crypto", condition: .when(traits: ["OpenIDConnect"])),
                // The web request overhead workload (`--web`): each framework's bare route, its own sessions (the
                // peer) and the session middleware, served by a child process and loaded by wrk.
                .target(name: "UserSessionsHummingbird", condition: .when(traits: ["Hummingbird"])),
                .product(name: "Hummingbird", package: "hummingbird", condition: .when(traits: ["Hummingbird"])),
                .product(
                    name: "HummingbirdAuth", package: "hummingbird-auth", condition: .when(traits: ["Hummingbird"])),
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle",
                    condition: .when(traits: ["Hummingbird"])),
                .target(name: "UserSessionsVapor", condition: .when(traits: ["Vapor"])),
                .product(name: "Vapor", package: "vapor", condition: .when(traits: ["Vapor"])),
            ],
            path: "Benchmarks/RefreshContention"
        ),
        .executableTarget(
            name: "ServerDemo",
            dependencies: ["UserSessions"],
            path: "Examples/ServerDemo"
        ),
        // The Vapor example (Examples/VaporServer): the Hummingbird example's pages, routes and command line on Vapor 4.
        // Every file is behind `#if Vapor`, so with default traits it is an empty program that builds no other
        // package; with every trait it is built by the every-trait build, at no extra cost for CI.
        .executableTarget(
            name: "VaporServer",
            dependencies: [
                "UserSessions",
                "UserSessionsOpenIDConnect",
                .target(name: "UserSessionsVapor", condition: .when(traits: ["Vapor"])),
                .product(name: "Vapor", package: "vapor", condition: .when(traits: ["Vapor"])),
                .target(name: "UserSessionsLogging", condition: .when(traits: ["Logging"])),
                .target(name: "UserSessionsPostgres", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
            ],
            path: "Examples/VaporServer/Sources/VaporServer"
        ),
        // The Hummingbird example's sources (Examples/HummingbirdServer, which has a Package.swift of its own for
        // users to copy) built a second way, as a target of this package: CI's every-trait build makes it with the
        // packages it already builds, instead of a build of Hummingbird, NIO and PostgresNIO of its own. Its files
        // are empty unless the four traits it uses are on (BUILT_BY_ROOT_PACKAGE tells them which build they are in).
        .executableTarget(
            name: "HummingbirdExample",
            dependencies: [
                "UserSessions",
                .target(name: "UserSessionsOpenIDConnect", condition: .when(traits: ["Hummingbird"])),
                .target(name: "UserSessionsHummingbird", condition: .when(traits: ["Hummingbird"])),
                .product(name: "Hummingbird", package: "hummingbird", condition: .when(traits: ["Hummingbird"])),
                .target(name: "UserSessionsServiceLifecycle", condition: .when(traits: ["ServiceLifecycle"])),
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle",
                    condition: .when(traits: ["ServiceLifecycle"])),
                .target(name: "UserSessionsLogging", condition: .when(traits: ["Logging"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Logging"])),
                .target(name: "UserSessionsPostgres", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
            ],
            path: "Examples/HummingbirdServer/Sources/HummingbirdServer",
            swiftSettings: [.define("BUILT_BY_ROOT_PACKAGE")]
        ),
        .executableTarget(
            name: "FileStoreCrashWriter",
            dependencies: ["UserSessions"],
            path: "Tests/CrashWriter"
        ),
        // One process of a fleet sharing a user through a token store, for the multi-process tests (FleetTests).
        // With the PostgreSQL trait it also takes `--store postgres:URL#namespace` (UserSessionsPostgresTests).
        .executableTarget(
            name: "FleetNode",
            dependencies: [
                "UserSessions",
                "UserSessionsTestSupport",
                .target(name: "UserSessionsPostgres", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["PostgreSQL"])),
                // `--sealed KEY_BASE64` wraps the store in a SealedTokenStore (UserSessionsSealingTests).
                .target(name: "UserSessionsSealing", condition: .when(traits: ["Sealing"])),
                // `--dpop` signs every refresh's DPoP proof with the key stored beside the credentials.
                .target(name: "UserSessionsOpenIDConnect", condition: .when(traits: ["OpenIDConnect"])),
            ],
            path: "Tests/FleetNode"
        ),
        // The python fixture servers' launchers and the transport suite every HTTPTransport must pass; used by both
        // test targets and by the benchmark's transport workload.
        .target(
            name: "UserSessionsTestSupport",
            dependencies: [
                "UserSessions",
                // `PostgresTestClient`, the PostgreSQL test targets' one client; without the trait nothing is built.
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["PostgreSQL"])),
                // `RecordingTracer`, the tracing tests' in-memory tracer; without the trait nothing is built.
                .product(name: "Tracing", package: "swift-distributed-tracing", condition: .when(traits: ["Tracing"])),
            ],
            path: "Tests/UserSessionsTestSupport"
        ),
        .testTarget(
            name: "UserSessionsTests",
            dependencies: ["UserSessions", "UserSessionsTestSupport"],
            exclude: ["Fixtures"]
        ),
        // The integrations' tests; every file is behind `#if <Trait>`, so with default traits this target is empty.
        .testTarget(
            name: "UserSessionsIntegrationTests",
            dependencies: [
                "UserSessions",
                "UserSessionsLogging",
                "UserSessionsMetrics",
                "UserSessionsServiceLifecycle",
                "UserSessionsAsyncHTTPClient",
                "UserSessionsTestSupport",
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Logging"])),
                .product(name: "InMemoryLogging", package: "swift-log", condition: .when(traits: ["Logging"])),
                .product(name: "MetricsTestKit", package: "swift-metrics", condition: .when(traits: ["Metrics"])),
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle",
                    condition: .when(traits: ["ServiceLifecycle"])),
                .product(
                    name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle",
                    condition: .when(traits: ["ServiceLifecycle"])),
                .product(
                    name: "AsyncHTTPClient", package: "async-http-client",
                    condition: .when(traits: ["AsyncHTTPClient"])),
                .target(name: "UserSessionsTracing", condition: .when(traits: ["Tracing"])),
                .product(name: "Tracing", package: "swift-distributed-tracing", condition: .when(traits: ["Tracing"])),
            ]
        ),
        // The PostgreSQL store's tests; every file is behind `#if PostgreSQL`, and they run only when
        // USER_SESSIONS_POSTGRES_URL names a server (Scripts/with-postgres.sh starts a throwaway one). With the Sealing
        // trait too, the sealed PostgreSQL store's tests (`#if PostgreSQL && Sealing`).
        .testTarget(
            name: "UserSessionsPostgresTests",
            dependencies: [
                "UserSessions",
                "UserSessionsPostgres",
                "UserSessionsTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "InMemoryLogging", package: "swift-log", condition: .when(traits: ["PostgreSQL"])),
                .target(name: "UserSessionsSealing", condition: .when(traits: ["Sealing"])),
                // The DPoP-bound fleet: its key is made and its thumbprint checked with the OpenIDConnect module.
                .target(name: "UserSessionsOpenIDConnect", condition: .when(traits: ["OpenIDConnect"])),
            ]
        ),
        // The sealed store's tests over the file store and the remote store; every file is behind `#if Sealing`.
        // Its PostgreSQL tests (sealed rows, the sealed fleet) are in UserSessionsPostgresTests, behind
        // `#if PostgreSQL && Sealing`.
        .testTarget(
            name: "UserSessionsSealingTests",
            dependencies: [
                "UserSessions",
                "UserSessionsSealing",
                "UserSessionsTestSupport",
                .product(name: "Crypto", package: "swift-crypto", condition: .when(traits: ["Sealing"])),
            ]
        ),
        // Sign-in and sign-out against a real OpenID Connect provider (Fixtures/oidc_provider.py, on Authlib); every
        // file is behind `#if OpenIDConnect`.
        .testTarget(
            name: "UserSessionsOpenIDConnectTests",
            dependencies: [
                "UserSessions",
                "UserSessionsOpenIDConnect",
                "UserSessionsTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["PostgreSQL"])),
                .target(name: "UserSessionsTracing", condition: .when(traits: ["Tracing"])),
                .product(name: "Tracing", package: "swift-distributed-tracing", condition: .when(traits: ["Tracing"])),
            ],
            exclude: ["Fixtures"]
        ),
        // Web sessions against a real Hummingbird server on 127.0.0.1 and the provider fixture of
        // UserSessionsOpenIDConnectTests; every file is behind `#if Hummingbird`, so with default traits this target
        // builds nothing new. Its PostgreSQL tests are behind `#if Hummingbird && PostgreSQL`.
        .testTarget(
            name: "UserSessionsHummingbirdTests",
            dependencies: [
                "UserSessions",
                "UserSessionsOpenIDConnect",
                "UserSessionsHummingbird",
                "UserSessionsTestSupport",
                .target(name: "UserSessionsPostgres", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "Hummingbird", package: "hummingbird", condition: .when(traits: ["Hummingbird"])),
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle",
                    condition: .when(traits: ["Hummingbird"])),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: .when(traits: ["Hummingbird"])),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Hummingbird"])),
                .target(name: "UserSessionsTracing", condition: .when(traits: ["Tracing"])),
                .product(name: "Tracing", package: "swift-distributed-tracing", condition: .when(traits: ["Tracing"])),
            ]
        ),
        // Web sessions against a real Vapor server on 127.0.0.1 (Vapor's testing support, `.running`), the provider
        // fixture and the test support; every file is behind `#if Vapor`.
        .testTarget(
            name: "UserSessionsVaporTests",
            dependencies: [
                "UserSessions",
                "UserSessionsOpenIDConnect",
                "UserSessionsVapor",
                "UserSessionsTestSupport",
                .product(name: "Vapor", package: "vapor", condition: .when(traits: ["Vapor"])),
                .product(name: "VaporTesting", package: "vapor", condition: .when(traits: ["Vapor"])),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
