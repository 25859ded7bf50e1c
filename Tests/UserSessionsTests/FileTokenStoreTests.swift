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
private struct ScratchDirectory {
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

private func permissions(_ path: String) -> mode_t? {
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

    private func tokenFileURL(_ store: FileTokenStore, _ identifier: String) throws -> URL {
        store.directory.appending(path: try IdentifierEncoding.name(for: identifier).value + ".json")
    }

    @Test func roundTripsAcrossANewStoreInstance() async throws {
        let scratch = try ScratchDirectory()
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
        let scratch = try ScratchDirectory()
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
        let scratch = try ScratchDirectory()
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
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.url.appending(path: "a/b/tokens", directoryHint: .isDirectory)
        let store = FileTokenStore(directory: directory)
        try await store.save(Self.session("u"), identifier: "u")
        try await store.saveCurrentIdentifier("u")

        #expect(permissions(directory.path(percentEncoded: false)) == 0o700)
        #expect(permissions(scratch.url.appending(path: "a").path(percentEncoded: false)) == 0o700)
        #expect(permissions(try tokenFileURL(store, "u").path(percentEncoded: false)) == 0o600)
        let currentFile = directory.appending(path: FileTokenStore.currentIdentifierFileName)
        #expect(permissions(currentFile.path(percentEncoded: false)) == 0o600)
    }

    @Test func leavesThePermissionsOfAnExistingDirectoryAlone() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        #expect(chmod(scratch.path, 0o750) == 0)
        try await FileTokenStore(directory: scratch.url).save(Self.session("u"), identifier: "u")
        #expect(permissions(scratch.path) == 0o750)
    }

    static let hostileIdentifiers: [String] = [
        "../../etc/passwd", "../../../../../../../../tmp/escaped", "a/b", "..", ".", "/", "//", "./.", "~", "$HOME",
        "a\\b", "\u{2024}\u{2024}\u{2215}etc", "\u{FF0E}\u{FF0E}\u{FF0F}x", "e\u{301}", "é", "A", "a", ".hidden",
        ".tmp-123", "current-identifier", "u-x", "h-00", String(repeating: "../", count: 3_400),
        String(repeating: "x", count: 10_240), String(repeating: "/", count: 10_240),
    ]

    @Test func hostileIdentifiersNeverEscapeTheDirectory() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.url.appending(path: "one/two/tokens", directoryHint: .isDirectory)
        let store = FileTokenStore(directory: directory)
        for (index, identifier) in Self.hostileIdentifiers.enumerated() {
            try await store.save(Self.session("user-\(index)"), identifier: identifier)
        }

        // Nothing but the directory chain and files directly inside the store directory.
        for entry in scratch.allEntries() where !["one", "one/two", "one/two/tokens"].contains(entry) {
            #expect(entry.hasPrefix("one/two/tokens/"), "escaped: \(entry)")
            let name = String(entry.dropFirst("one/two/tokens/".count))
            #expect(!name.contains("/"))
            #expect(name.hasPrefix("u-") || name.hasPrefix("h-"), "unexpected file \(name)")
            #expect(name.utf8.count <= 210)
        }
        #expect(scratch.allEntries().count == 3 + Self.hostileIdentifiers.count)

        // Every identifier reads back its own session: none overwrote another.
        for (index, identifier) in Self.hostileIdentifiers.enumerated() {
            #expect(try await store.load(identifier: identifier)?.userInfo.id == "user-\(index)")
        }
        let listed = try await store.storedIdentifiers()
        #expect(listed.count == Self.hostileIdentifiers.count)
        #expect(Set(listed.map { Array($0.utf8) }) == Set(Self.hostileIdentifiers.map { Array($0.utf8) }))
    }

    struct InvalidIdentifier: Sendable, CustomTestStringConvertible {
        var name: String
        var identifier: String
        var testDescription: String { name }
    }

    @Test(arguments: [
        InvalidIdentifier(name: "empty", identifier: ""),
        InvalidIdentifier(name: "NUL", identifier: "a\u{0}b"),
        InvalidIdentifier(name: "64 KiB + 1", identifier: String(repeating: "a", count: 64 * 1024 + 1)),
    ])
    func rejectsInvalidIdentifiersEverywhere(_ invalid: InvalidIdentifier) async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        let identifier = invalid.identifier
        await #expect(throws: UserSessionError(.invalidIdentifier, "")) {
            try await store.save(Self.session("u"), identifier: identifier)
        }
        await #expect(throws: UserSessionError(.invalidIdentifier, "")) { try await store.load(identifier: identifier) }
        await #expect(throws: UserSessionError(.invalidIdentifier, "")) {
            try await store.remove(identifier: identifier)
        }
        await #expect(throws: UserSessionError(.invalidIdentifier, "")) {
            try await store.saveCurrentIdentifier(identifier)
        }
        #expect(scratch.allEntries() == [])
    }

    struct CorruptFile: Sendable, CustomTestStringConvertible {
        var name: String
        var contents: @Sendable (_ valid: [UInt8]) -> [UInt8]
        var testDescription: String { name }
    }

    private static func json(_ text: String) -> @Sendable ([UInt8]) -> [UInt8] { { _ in Array(text.utf8) } }

    static let corruptFiles: [CorruptFile] = [
        CorruptFile(name: "garbage", contents: json("this is not JSON")),
        CorruptFile(name: "empty", contents: { _ in [] }),
        CorruptFile(name: "truncated to half", contents: { Array($0.prefix($0.count / 2)) }),
        CorruptFile(name: "truncated by one byte", contents: { Array($0.dropLast()) }),
        CorruptFile(name: "NUL bytes", contents: { Array(repeating: 0, count: $0.count) }),
        CorruptFile(name: "array", contents: json("[1, 2, 3]")),
        CorruptFile(name: "wrong format", contents: json(#"{"format": "something.else", "version": 1}"#)),
        CorruptFile(name: "no format", contents: json(#"{"version": 1, "identifier": "victim"}"#)),
        CorruptFile(name: "no version", contents: json(#"{"format": "swift-user-sessions.token"}"#)),
        CorruptFile(name: "version zero", contents: json(#"{"format": "swift-user-sessions.token", "version": 0}"#)),
        CorruptFile(
            name: "version as a string",
            contents: json(#"{"format": "swift-user-sessions.token", "version": "1"}"#)
        ),
        CorruptFile(
            name: "no session",
            contents: json(#"{"format": "swift-user-sessions.token", "version": 1, "identifier": "victim"}"#)
        ),
        CorruptFile(
            name: "session of the wrong type",
            contents: json(
                #"{"format": "swift-user-sessions.token", "version": 1, "identifier": "victim", "session": 5}"#
            )
        ),
        CorruptFile(
            name: "credentials without access token",
            contents: json(
                #"{"format": "swift-user-sessions.token", "version": 1, "identifier": "victim", "session": "#
                    + #"{"user_info": {"id": "u", "attributes": {}}, "credentials": {"version": 1}}}"#
            )
        ),
        CorruptFile(
            name: "another identifier",
            contents: json(
                #"{"format": "swift-user-sessions.token", "version": 1, "identifier": "intruder", "session": "#
                    + #"{"user_info": {"id": "u", "attributes": {}}}}"#
            )
        ),
        CorruptFile(name: "larger than 8 MiB", contents: { $0 + Array(repeating: 0x20, count: 8 * 1024 * 1024) }),
    ]

    @Test(arguments: corruptFiles)
    func corruptFilesAreTypedErrorsAndKeptByteForByte(_ corrupt: CorruptFile) async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        try await store.save(Self.session("victim"), identifier: "victim")
        let file = try tokenFileURL(store, "victim")
        let bytes = corrupt.contents(Array(try Data(contentsOf: file)))
        try Data(bytes).write(to: file)

        let error = await #expect(throws: UserSessionError.self) { try await store.load(identifier: "victim") }
        #expect(error?.code == .storeCorrupt)
        #expect(error.map { !"\($0)".contains("secret") } == true)
        // Loading again gives the same answer, and the bytes are still there for inspection.
        await #expect(throws: UserSessionError(.storeCorrupt, "")) { try await store.load(identifier: "victim") }
        #expect(Array(try Data(contentsOf: file)) == bytes)
        // The identifier is still listed, so the corruption is not silently hidden.
        #expect(try await store.storedIdentifiers() == ["victim"])
    }

    @Test func aSaveReplacesACorruptFile() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        try Data("{\"form".utf8).write(to: try tokenFileURL(store, "victim"))
        let session = Self.session("victim")
        try await store.save(session, identifier: "victim")
        #expect(try await store.load(identifier: "victim") == session)
    }

    @Test(arguments: [
        #"{"format": "swift-user-sessions.token", "version": 3, "identifier": "victim", "session": {"new": true}}"#,
        #"{"format": "swift-user-sessions.token", "version": 1, "identifier": "victim", "session": "#
            + #"{"user_info": {"id": "u", "attributes": {}}, "credentials": {"version": 2, "access_token": "a"}}}"#,
    ])
    func newerFormatsAreRejectedAndKept(_ contents: String) async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        let file = try tokenFileURL(store, "victim")
        try Data(contents.utf8).write(to: file)
        let error = await #expect(throws: UserSessionError.self) { try await store.load(identifier: "victim") }
        #expect(error?.code == .unsupportedFormatVersion)
        #expect(try String(contentsOf: file, encoding: .utf8) == contents)
    }

    @Test func corruptAndNewerCurrentIdentifierFilesAreTypedErrors() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        let file = scratch.url.appending(path: FileTokenStore.currentIdentifierFileName)
        let cases: [(String, UserSessionError.Code)] = [
            ("{", .storeCorrupt),
            (#"{"format": "swift-user-sessions.token", "version": 1, "identifier": "x"}"#, .storeCorrupt),
            (#"{"format": "swift-user-sessions.current-identifier", "version": 1, "identifier": ""}"#, .storeCorrupt),
            (
                #"{"format": "swift-user-sessions.current-identifier", "version": 9, "identifier": "x"}"#,
                .unsupportedFormatVersion
            ),
        ]
        for (contents, code) in cases {
            try Data(contents.utf8).write(to: file)
            let error = await #expect(throws: UserSessionError.self) { try await store.loadCurrentIdentifier() }
            #expect(error?.code == code, "\(contents)")
            #expect(try String(contentsOf: file, encoding: .utf8) == contents)
        }
    }

    @Test func concurrentSavesOfOneIdentifierLeaveOneCompleteFile() async throws {
        let scratch = try ScratchDirectory()
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
        let scratch = try ScratchDirectory()
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

    @Test func currentIdentifierRoundTripsAndIsRemovedByNil() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        #expect(try await store.loadCurrentIdentifier() == nil)
        try await store.saveCurrentIdentifier("../first")
        try await store.saveCurrentIdentifier("second user")
        #expect(try await FileTokenStore(directory: scratch.url).loadCurrentIdentifier() == "second user")
        try await store.saveCurrentIdentifier(nil)
        #expect(try await store.loadCurrentIdentifier() == nil)
        try await store.saveCurrentIdentifier(nil)
        #expect(scratch.allEntries() == [])
    }

    @Test func removeDeletesOnlyThatIdentifierAndToleratesNothing() async throws {
        let scratch = try ScratchDirectory()
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

    @Test func listingSkipsTemporaryUnrelatedAndUnreadableHashedFiles() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        let long = String(repeating: "L", count: 500)
        try await store.save(Self.session("long"), identifier: long)
        try await store.save(Self.session("short"), identifier: "short")
        try await store.saveCurrentIdentifier("short")
        // A temporary file left by a crash mid-write, unrelated files, and a corrupt hashed file.
        for name in [".tmp-abc", ".tmp-u-x.json", "notes.txt", "u-_zz.json", "x-y.json"] {
            try Data("junk".utf8).write(to: scratch.url.appending(path: name))
        }
        try Data("{".utf8).write(to: scratch.url.appending(path: "h-" + StableHash128("other").hexDigits + ".json"))

        #expect(try await store.storedIdentifiers() == [long, "short"].sorted())
        #expect(try await store.load(identifier: long)?.userInfo.id == "long")
    }

    @Test func aHashedNameHeldByAnotherIdentifierIsDetectedNotTrusted() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        let victim = String(repeating: "v", count: 300)
        let other = String(repeating: "o", count: 300)
        // Simulate a collision: the other identifier's content under the victim's hashed name.
        try await store.save(Self.session("other"), identifier: other)
        let victimFile = try tokenFileURL(store, victim)
        try FileManager.default.moveItem(at: try tokenFileURL(store, other), to: victimFile)
        let bytes = try Data(contentsOf: victimFile)

        await #expect(throws: UserSessionError(.storeFailure, "")) { try await store.load(identifier: victim) }
        await #expect(throws: UserSessionError(.storeFailure, "")) {
            try await store.save(Self.session("victim"), identifier: victim)
        }
        try await store.remove(identifier: victim)
        #expect(try Data(contentsOf: victimFile) == bytes)
    }

    @Test func aSymbolicLinkIsNeverFollowed() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.url.appending(path: "tokens", directoryHint: .isDirectory)
        let store = FileTokenStore(directory: directory)
        try await store.save(Self.session("u"), identifier: "u")
        let outside = scratch.url.appending(path: "outside.json")
        try Data("outside".utf8).write(to: outside)
        let file = try tokenFileURL(store, "u")
        try FileManager.default.removeItem(at: file)
        try FileManager.default.createSymbolicLink(at: file, withDestinationURL: outside)

        await #expect(throws: UserSessionError(.storeFailure, "")) { try await store.load(identifier: "u") }
        // A save replaces the link itself; the file it pointed to is untouched.
        try await store.save(Self.session("u"), identifier: "u")
        #expect(try String(contentsOf: outside, encoding: .utf8) == "outside")
        #expect(try await store.load(identifier: "u")?.userInfo.id == "u")
    }

    @Test func aDirectoryPathThatIsAFileIsAStoreFailure() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let blocker = scratch.url.appending(path: "blocker")
        try Data("x".utf8).write(to: blocker)
        let store = FileTokenStore(directory: blocker.appending(path: "tokens"))
        let error = await #expect(throws: UserSessionError.self) {
            try await store.save(Self.session("u"), identifier: "u")
        }
        #expect(error?.code == .storeFailure)
        #expect(error?.underlying is SystemCallError)
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
