// swift-tools-version:6.2
import PackageDescription

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

// A Hummingbird 2 server whose browsers sign in with OpenID Connect through UserSessionsHummingbird: an opaque
// cookie in the browser, the tokens on the server, a token-forwarding proxy to an upstream API. It depends on
// swift-user-sessions by path with the traits it uses, so the root package itself stays free of dependencies.
//
// SwiftPM names a path dependency after its directory, which is wherever the repository was cloned; outside this
// repository, depend on it by URL instead: .package(url: "https://github.com/…/swift-user-sessions", from: "…",
// traits: ["Hummingbird", "PostgreSQL", "Logging", "ServiceLifecycle"]) and `package: userSessions`.
let userSessions = URL(fileURLWithPath: Context.packageDirectory).deletingLastPathComponent()
    .deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "HummingbirdServer",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../..", traits: ["Hummingbird", "PostgreSQL", "Logging", "ServiceLifecycle"]),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        .executableTarget(
            name: "HummingbirdServer",
            dependencies: [
                .product(name: "UserSessions", package: userSessions),
                .product(name: "UserSessionsHummingbird", package: userSessions),
                .product(name: "UserSessionsOpenIDConnect", package: userSessions),
                .product(name: "UserSessionsPostgres", package: userSessions),
                .product(name: "UserSessionsLogging", package: userSessions),
                .product(name: "UserSessionsServiceLifecycle", package: userSessions),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ]
        )
    ],
    swiftLanguageModes: [.v6]
)
