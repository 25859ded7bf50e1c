import Foundation
import Testing

@testable import UserSessions

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A fresh directory under the system temporary directory, removed by ``remove()``.
struct FileStoreScratch {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory.appending(
            path: "user-sessions-file-store-\(UUID().uuidString)",
            directoryHint: .isDirectory
        )
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    var path: String { url.path(percentEncoded: false) }

    func remove() { try? FileManager.default.removeItem(at: url) }

    /// Every path below this directory, relative to it.
    func allEntries() -> [String] {
        (FileManager.default.enumerator(atPath: path)?.allObjects as? [String] ?? []).sorted()
    }
}

func filePermissions(_ path: String) -> mode_t? {
    var status = stat()
    guard stat(path, &status) == 0 else { return nil }
    return status.st_mode & 0o777
}

struct FileTokenStoreTests {
    static func session(_ id: String, token: String = "access-secret") -> StoredSession {
        let now = Date()
        return StoredSession(
            userInfo: UserInfo(id: id, email: "user@example.com", name: "Ü ser", attributes: ["plan": "pro"]),
            credentials: Credentials(
                accessToken: token,
                refreshToken: "refresh-secret",
                expiresAt: now.addingTimeInterval(3600.123_456_789),
                lastRefreshedAt: now,
                source: .signIn,
                grantedPermissions: ["email", "profile"],
                declinedPermissions: ["photos"]
            )
        )
    }

    func tokenFileURL(_ store: FileTokenStore, _ identifier: String) throws -> URL {
        store.directory.appending(path: try IdentifierEncoding.name(for: identifier).value + ".json")
    }

    @Test func roundTripsAcrossANewStoreInstance() async throws {
        let scratch = try FileStoreScratch()
        defer { scratch.remove() }
        let directory = scratch.url.appending(path: "tokens", directoryHint: .isDirectory)
        let original = Self.session("ee977806d72865")
        try await FileTokenStore(directory: directory).save(original, identifier: "ee977806d72865")
        try await FileTokenStore(directory: directory).saveCurrentIdentifier("ee977806d72865")

        // A restart: a new instance reads what the old one wrote, dates included, exactly.
        let restarted = FileTokenStore(directory: directory)
        #expect(try await restarted.load(identifier: "ee977806d72865") == original)
        #expect(try await restarted.loadCurrentIdentifier() == "ee977806d72865")
        #expect(try await restarted.storedIdentifiers() == ["ee977806d72865"])
    }

    @Test func loadsNothingFromAMissingDirectoryOrFile() async throws {
        let scratch = try FileStoreScratch()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url.appending(path: "never/created"))
        #expect(try await store.load(identifier: "nobody") == nil)
        #expect(try await store.loadCurrentIdentifier() == nil)
        #expect(try await store.storedIdentifiers() == [])
        try await store.remove(identifier: "nobody")
        try await store.saveCurrentIdentifier(nil)
        #expect(scratch.allEntries() == [])
    }

    @Test func writesTheDocumentedVersionedFormat() async throws {
        let scratch = try FileStoreScratch()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        try await store.save(StoredSession(userInfo: UserInfo(id: "u"), credentials: nil), identifier: "Some.User")
        let data = try Data(contentsOf: try tokenFileURL(store, "Some.User"))
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(object["format"] as? String == "swift-user-sessions.token")
        #expect(object["version"] as? Int == 2)
        #expect((object["revision"] as? NSNumber)?.uint64Value ?? 0 >= 1)
        #expect(object["identifier"] as? String == "Some.User")
        #expect(object["session"] is [String: Any])
        #expect(try tokenFileURL(store, "Some.User").lastPathComponent == "u-_53ome_2e_55ser.json")
    }

    @Test func createsPrivateFilesInAPrivateDirectory() async throws {
        let scratch = try FileStoreScratch()
        defer { scratch.remove() }
        let directory = scratch.url.appending(path: "a/b/tokens", directoryHint: .isDirectory)
        let store = FileTokenStore(directory: directory)
        try await store.save(Self.session("u"), identifier: "u")
        try await store.saveCurrentIdentifier("u")

        #expect(filePermissions(directory.path(percentEncoded: false)) == 0o700)
        #expect(filePermissions(scratch.url.appending(path: "a").path(percentEncoded: false)) == 0o700)
        #expect(filePermissions(try tokenFileURL(store, "u").path(percentEncoded: false)) == 0o600)
        let currentFile = directory.appending(path: FileTokenStore.currentIdentifierFileName)
        #expect(filePermissions(currentFile.path(percentEncoded: false)) == 0o600)
    }

    @Test func leavesThePermissionsOfAnExistingDirectoryAlone() async throws {
        let scratch = try FileStoreScratch()
        defer { scratch.remove() }
        #expect(chmod(scratch.path, 0o750) == 0)
        try await FileTokenStore(directory: scratch.url).save(Self.session("u"), identifier: "u")
        #expect(filePermissions(scratch.path) == 0o750)
    }

    static let hostileIdentifiers: [String] = [
        "../../etc/passwd", "../../../../../../../../tmp/escaped", "a/b", "..", ".", "/", "//", "./.", "~", "$HOME",
        "a\\b", "\u{2024}\u{2024}\u{2215}etc", "\u{FF0E}\u{FF0E}\u{FF0F}x", "e\u{301}", "é", "A", "a", ".hidden",
        ".tmp-123", "current-identifier", "u-x", "h-00", String(repeating: "../", count: 3_400),
        String(repeating: "x", count: 10_240), String(repeating: "/", count: 10_240),
    ]

    @Test func concurrentSavesOfOneIdentifierLeaveOneCompleteFile() async throws {
        let scratch = try FileStoreScratch()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<100 {
                group.addTask { try await store.save(Self.session("u", token: "token-\(index)"), identifier: "shared") }
            }
            try await group.waitForAll()
        }
        let loaded = try #require(try await store.load(identifier: "shared"))
        let token = try #require(loaded.credentials?.accessToken)
        #expect((0..<100).map { "token-\($0)" }.contains(token))
        // No temporary file is left behind.
        #expect(scratch.allEntries() == [try tokenFileURL(store, "shared").lastPathComponent])
    }

    @Test func concurrentSavesOfManyIdentifiersAllLand() async throws {
        let scratch = try FileStoreScratch()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<100 {
                group.addTask { try await store.save(Self.session("user-\(index)"), identifier: "user-\(index)") }
            }
            try await group.waitForAll()
        }
        #expect(try await store.storedIdentifiers() == (0..<100).map { "user-\($0)" }.sorted())
    }

    @Test func removeDeletesOnlyThatIdentifierAndToleratesNothing() async throws {
        let scratch = try FileStoreScratch()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        try await store.save(Self.session("a"), identifier: "a")
        try await store.save(Self.session("b"), identifier: "b")
        try await store.saveCurrentIdentifier("a")
        try await store.remove(identifier: "a")
        try await store.remove(identifier: "a")
        try await store.remove(identifier: "never-saved")
        #expect(try await store.load(identifier: "a") == nil)
        #expect(try await store.load(identifier: "b")?.userInfo.id == "b")
        #expect(try await store.storedIdentifiers() == ["b"])
        #expect(try await store.loadCurrentIdentifier() == "a")
    }

    @Test func defaultDirectoryFollowsXDGDataHome() {
        let home = URL(fileURLWithPath: "/home/someone", isDirectory: true)
        let xdg = FileTokenStore.defaultDirectory(environment: ["XDG_DATA_HOME": "/data/x"], home: home)
        #expect(xdg.path(percentEncoded: false).hasPrefix("/data/x/UserSessions/tokens"))
        let fallback = FileTokenStore.defaultDirectory(environment: [:], home: home)
        #expect(fallback.path(percentEncoded: false).hasPrefix("/home/someone/.local/share/UserSessions/tokens"))
        let relative = FileTokenStore.defaultDirectory(environment: ["XDG_DATA_HOME": "relative"], home: home)
        #expect(relative == fallback)
        #expect(FileTokenStore.defaultDirectory().path(percentEncoded: false).contains("UserSessions/tokens"))
    }
}
