// swift-tools-version:6.2
import PackageDescription

let package = Package(
    name: "swift-user-sessions",
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11)],
    products: [
        .library(name: "UserSessions", targets: ["UserSessions"])
    ],
    targets: [
        .target(name: "UserSessions"),
        .executableTarget(
            name: "RefreshContention",
            dependencies: ["UserSessions"],
            path: "Benchmarks/RefreshContention"
        ),
        .executableTarget(
            name: "ServerDemo",
            dependencies: ["UserSessions"],
            path: "Examples/ServerDemo"
        ),
        .executableTarget(
            name: "FileStoreCrashWriter",
            dependencies: ["UserSessions"],
            path: "Tests/CrashWriter"
        ),
        .testTarget(
            name: "UserSessionsTests",
            dependencies: ["UserSessions"],
            exclude: ["Fixtures"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
