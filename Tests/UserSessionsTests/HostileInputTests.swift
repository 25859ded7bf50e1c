import Foundation
import Testing

@testable import UserSessions

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Hostile identifiers, JSON and HTTP responses, each driven through every entry point that takes it. Each must end
/// in a typed ``UserSessionError`` (or, for identifiers that are merely odd, a correct round trip that stays inside
/// its own file or directory). Nothing here asserts timing: a hang or a crash fails the suite by itself.
struct HostileInputTests {
    // MARK: - Identifiers

    /// Odd but valid identifiers: each must round-trip to its own data and never name a path outside the store.
    static let oddIdentifiers: [String] = [
        "..", ".", "/", "//", "../../../../etc/passwd", "a/../../b", "/absolute", "~", ".hidden", "C:\\Windows",
        "a\\b", "%2e%2e%2f", "current-identifier", "current-identifier.json", "u-abc", "h-abc", ".tmp-abc",
        // Invalid UTF-8 from raw bytes: decoding repairs it to U+FFFD, which must still stay in its own file.
        String(decoding: [0xFF, 0xFE, 0x2E, 0x2E, 0x2F], as: UTF8.self),
        String(decoding: [0xC0, 0xAF, 0xE0, 0x80, 0xAF, 0x2E, 0x2E], as: UTF8.self),  // overlong encodings of "/"
        String(decoding: [0xED, 0xA0, 0x80], as: UTF8.self),  // a lone surrogate
        // Unicode look-alikes of "admin": each is a different user and must get a different file.
        "admin", "\u{430}dmin", "\u{FF41}\u{FF44}\u{FF4D}\u{FF49}\u{FF4E}", "admin\u{200B}", "admin ", "Admin",
        "\u{202E}nimda", "adm\u{131}n",
        // Canonically equivalent spellings (Swift's `==` calls them equal; the stores key by bytes).
        "caf\u{E9}", "cafe\u{301}",
        String(repeating: "/", count: 1000),  // encoded form too long: a hashed name
        String(repeating: "x", count: 64 * 1024),  // exactly the limit
    ]

    /// Identifiers every store and the directories must refuse with `invalidIdentifier`.
    static let refusedIdentifiers: [String] = [
        "", "\u{0}", "a\u{0}b", "../\u{0}/etc", String(repeating: "x", count: 64 * 1024 + 1),
        String(repeating: "\u{E9}", count: 40_000),  // 80,000 UTF-8 bytes
    ]

    /// A fresh store in a fresh root; `root` must end up holding nothing but the store's directory.
    static func makeFileStore() -> (root: URL, store: FileTokenStore) {
        let root = FileManager.default.temporaryDirectory.appending(path: "hostile-\(UUID().uuidString)")
        return (root, FileTokenStore(directory: root.appending(path: "tokens", directoryHint: .isDirectory)))
    }

    static func session(_ identifier: String, index: Int) -> StoredSession {
        StoredSession(
            userInfo: UserInfo(id: "user-\(index)"),
            credentials: Credentials(accessToken: "access-\(index)", refreshToken: "refresh-\(index)")
        )
    }

    @Test func oddIdentifiersRoundTripThroughTheFileStoreAndStayInItsDirectory() async throws {
        let (root, store) = Self.makeFileStore()
        defer { try? FileManager.default.removeItem(at: root) }
        for (index, identifier) in Self.oddIdentifiers.enumerated() {
            try await store.save(Self.session(identifier, index: index), identifier: identifier)
        }
        try await store.saveCurrentIdentifier("..")
        // Each one reads back its own session: look-alikes and equivalent spellings never share a file.
        for (index, identifier) in Self.oddIdentifiers.enumerated() {
            #expect(try await store.load(identifier: identifier) == Self.session(identifier, index: index), "#\(index)")
        }
        #expect(try await store.loadCurrentIdentifier() == "..")
        let listed = try await store.storedIdentifiers()
        #expect(Set(listed.map { Array($0.utf8) }) == Set(Self.oddIdentifiers.map { Array($0.utf8) }))
        // Nothing was written anywhere but directly inside the store's directory, and every name is safe.
        let everything = FileManager.default.enumerator(atPath: root.path(percentEncoded: false))?.allObjects
        let names = (everything as? [String] ?? []).sorted()
        #expect(names.first == "tokens")
        for name in names.dropFirst() {
            let parts = name.split(separator: "/", omittingEmptySubsequences: false)
            #expect(parts.count == 2 && parts[0] == "tokens", "\(name) is not directly in the store's directory")
            let file = parts.last.map(String.init) ?? ""
            let isSafe = file.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                    || [UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: ".")].contains(byte)
            }
            #expect(isSafe && (file.hasPrefix("u-") || file.hasPrefix("h-") || file == "current-identifier.json"))
        }
        for identifier in Self.oddIdentifiers { try await store.remove(identifier: identifier) }
        #expect(try await store.storedIdentifiers().isEmpty)
    }

    @Test(arguments: refusedIdentifiers)
    func refusedIdentifiersAreTypedErrorsEverywhere(_ identifier: String) async throws {
        let (root, store) = Self.makeFileStore()
        defer { try? FileManager.default.removeItem(at: root) }
        let session = Self.session(identifier, index: 0)
        await Self.expectCode(.invalidIdentifier) { try await store.save(session, identifier: identifier) }
        await Self.expectCode(.invalidIdentifier) { _ = try await store.load(identifier: identifier) }
        await Self.expectCode(.invalidIdentifier) { try await store.remove(identifier: identifier) }
        await Self.expectCode(.invalidIdentifier) { try await store.saveCurrentIdentifier(identifier) }

        let directories = SessionDirectories(root: root.appending(path: "data"))
        await Self.expectCode(.invalidIdentifier) { _ = try directories.sessionDirectory(for: identifier) }
        await Self.expectCode(.invalidIdentifier) { try directories.create(for: identifier) }
        await Self.expectCode(.invalidIdentifier) { try directories.remove(for: identifier) }
        await Self.expectCode(.invalidIdentifier) { try await directories.createDirectories(for: identifier) }
        await Self.expectCode(.invalidIdentifier) { try await directories.removeDirectories(for: identifier) }

        // Refused before any request is made: nothing listens on this port.
        let remote = try RemoteTokenStore(endpoint: try #require(URL(string: "http://127.0.0.1:9/token_cache")))
        await Self.expectCode(.invalidIdentifier) { try await remote.save(session, identifier: identifier) }
        await Self.expectCode(.invalidIdentifier) { _ = try await remote.load(identifier: identifier) }
        await Self.expectCode(.invalidIdentifier) { try await remote.remove(identifier: identifier) }
        await Self.expectCode(.invalidIdentifier) { try await remote.saveCurrentIdentifier(identifier) }

        let controller = UserSessionController(store: store)
        let prototype = UserSessionPrototype(identifier: identifier, userInfo: UserInfo(id: "u"))
        await Self.expectCode(.invalidPrototype) { _ = try await controller.open(prototype) }
        #expect(controller.session.state == .undefined)
        // Nothing reached the disk.
        #expect(!FileManager.default.fileExists(atPath: root.path(percentEncoded: false)))
        await controller.shutdown()
    }

    @Test func sessionDirectoriesOfOddIdentifiersAreDistinctChildrenOfTheRoot() throws {
        let root = FileManager.default.temporaryDirectory.appending(path: "hostile-dirs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let directories = SessionDirectories(root: root)
        var seen: Set<String> = []
        for identifier in Self.oddIdentifiers {
            let directory = try directories.sessionDirectory(for: identifier)
            let parent = directory.deletingLastPathComponent().standardizedFileURL.path(percentEncoded: false)
            #expect(
                parent.trimmingSuffix("/") == root.standardizedFileURL.path(percentEncoded: false).trimmingSuffix("/"))
            #expect(seen.insert(directory.lastPathComponent).inserted)
            try directories.create(for: identifier)
        }
        let children = try FileManager.default.contentsOfDirectory(atPath: root.path(percentEncoded: false))
        #expect(Set(children) == seen)
        for identifier in Self.oddIdentifiers { try directories.remove(for: identifier) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.path(percentEncoded: false)).isEmpty)
    }

    @Test func theControllerOpensOddIdentifiersInsideItsStoreAndDataRoot() async throws {
        let (root, store) = Self.makeFileStore()
        defer { try? FileManager.default.removeItem(at: root) }
        let dataRoot = root.appending(path: "data", directoryHint: .isDirectory)
        let controller = UserSessionController(
            store: store, configuration: .init(dataDirectories: SessionDirectories(root: dataRoot)))
        for (index, identifier) in Self.oddIdentifiers.enumerated() {
            let prototype = UserSessionPrototype(
                identifier: identifier, userInfo: UserInfo(id: "user-\(index)"),
                credentials: Credentials(accessToken: "access-\(index)"))
            if identifier.utf8.count > UserSessionController.maximumIdentifierLength {
                await Self.expectCode(.invalidPrototype) { _ = try await controller.open(prototype) }
                continue
            }
            let session = try await controller.open(prototype)
            #expect(session.identifier.map { Array($0.utf8) } == Array(identifier.utf8))
            #expect(try await store.load(identifier: identifier)?.credentials?.accessToken == "access-\(index)")
            try await controller.closeAndClear()
            #expect(try await store.load(identifier: identifier) == nil)
        }
        let rootEntries = try FileManager.default.contentsOfDirectory(atPath: root.path(percentEncoded: false))
        #expect(Set(rootEntries).isSubset(of: ["tokens", "data"]))
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dataRoot.path(percentEncoded: false))
        #expect(leftovers.isEmpty, "closeAndClear left data directories: \(leftovers)")
        await controller.shutdown()
    }

    @Test func fileNamesThatAreNotUTF8OrNotOursAreSkippedByListingsAndReads() async throws {
        let (root, store) = Self.makeFileStore()
        defer { try? FileManager.default.removeItem(at: root) }
        try await store.save(Self.session("real", index: 1), identifier: "real")
        let directory = Array(store.directory.path(percentEncoded: false).utf8)
        let hostileNames: [[UInt8]] = [
            Array("u-".utf8) + [0xFF] + Array(".json".utf8),  // not UTF-8
            [0xFF, 0xFE] + Array(".json".utf8),
            Array(".tmp-".utf8) + [0xC0, 0xAF],
            Array("h-".utf8) + [0xFF] + Array(".json".utf8),
            Array("u-_ff.json".utf8),  // a valid escape of a byte that is not UTF-8 on its own
            Array("u-_2e_2e.json".utf8) + [0x80],
        ]
        for name in hostileNames {
            let path = directory + [UInt8(ascii: "/")] + name + [0]
            let descriptor = path.withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { characters in
                    characters.baseAddress.map { open($0, O_WRONLY | O_CREAT | O_EXCL, 0o600) } ?? -1
                }
            }
            try #require(descriptor >= 0, "could not create a file with a raw byte name")
            _ = write(descriptor, "{\"format\":", 10)
            _ = close(descriptor)
        }
        #expect(try await store.storedIdentifiers() == ["real"])
        #expect(try await store.load(identifier: "real") == Self.session("real", index: 1))
        // The identifier these raw bytes repair to is a different, unused key.
        #expect(try await store.load(identifier: String(decoding: [0xFF], as: UTF8.self)) == nil)
    }

    @Test func oddIdentifiersTravelToTheRemoteStoreAsSafeUniqueIDs() async throws {
        try await FixtureServer.run(script: "token_cache_server.py") { server in
            let store = try RemoteTokenStore(endpoint: server.url("/token_cache"))
            for (index, identifier) in Self.oddIdentifiers.enumerated() {
                try await store.save(Self.session(identifier, index: index), identifier: identifier)
                let (data, _) = try await URLSession.shared.data(from: server.url("/__last"))
                let last = try JSONDecoder().decode([String: String].self, from: data)
                let body = last["body"] ?? ""
                let uniqueID = body.split(separator: "&").first { $0.hasPrefix("unique_id=") }?.dropFirst(10) ?? ""
                #expect(uniqueID.hasPrefix("u-") || uniqueID.hasPrefix("h-"), "#\(index)")
                #expect(uniqueID.utf8.allSatisfy { $0 < 0x80 && $0 != UInt8(ascii: "%") && $0 != UInt8(ascii: ".") })
            }
            for (index, identifier) in Self.oddIdentifiers.enumerated() {
                #expect(try await store.load(identifier: identifier) == Self.session(identifier, index: index))
            }
        }
    }

    /// NFC and NFD spellings (and other canonically equivalent ones) are equal Swift strings but different UTF-8
    /// bytes. The rule: identifiers are compared by their bytes everywhere, never normalized, so every store and the
    /// registry keep them apart as two users.
    @Test func canonicallyEquivalentIdentifiersAreDifferentUsersEverywhere() async throws {
        let nfc = "caf\u{E9}"
        let nfd = "cafe\u{301}"
        let kelvin = "\u{212A}elvin"
        let plain = "Kelvin"
        #expect(nfc == nfd && kelvin == plain)  // Swift's view, which the package must not use for identifiers
        let pairs = [(nfc, nfd), (kelvin, plain)]
        let (root, fileStore) = Self.makeFileStore()
        defer { try? FileManager.default.removeItem(at: root) }
        let stores: [(String, any TokenStore)] = [("file", fileStore), ("memory", InMemoryTokenStore())]
        for (name, store) in stores {
            for (index, (first, second)) in pairs.enumerated() {
                try await store.save(Self.session(first, index: index * 2), identifier: first)
                try await store.save(Self.session(second, index: index * 2 + 1), identifier: second)
                #expect(try await store.load(identifier: first) == Self.session(first, index: index * 2), "\(name)")
                #expect(try await store.load(identifier: second) == Self.session(second, index: index * 2 + 1))
            }
            let listed = try await store.storedIdentifiers().map { Array($0.utf8) }
            #expect(Set(listed) == Set([nfc, nfd, kelvin, plain].map { Array($0.utf8) }), "\(name)")
            try await store.remove(identifier: nfd)
            #expect(try await store.load(identifier: nfc) != nil, "\(name): removing NFD removed NFC")
            #expect(try await store.load(identifier: nfd) == nil, "\(name)")
        }

        let registry = UserSessionRegistry(store: InMemoryTokenStore())
        let first = try await registry.open(UserSessionPrototype(identifier: nfc, userInfo: UserInfo(id: "nfc")))
        let second = try await registry.open(UserSessionPrototype(identifier: nfd, userInfo: UserInfo(id: "nfd")))
        #expect(first !== second)
        #expect(registry.count == 2)
        #expect(registry.existingController(for: nfc) === first)
        #expect(registry.existingController(for: nfd) === second)
        #expect(Set(registry.identifiers.map { Array($0.utf8) }) == Set([nfc, nfd].map { Array($0.utf8) }))
        #expect(first.session.userInfo?.id == "nfc" && second.session.userInfo?.id == "nfd")
        await registry.close(identifier: nfd)
        #expect(registry.existingController(for: nfc) === first && first.session.isOpened)
        #expect(registry.existingController(for: nfd) == nil)
        // The current user: switching from one spelling to the other closes the first (two users).
        _ = try await registry.switchUser(to: UserSessionPrototype(identifier: nfd, userInfo: UserInfo(id: "nfd")))
        _ = try await registry.switchUser(to: UserSessionPrototype(identifier: nfc, userInfo: UserInfo(id: "nfc2")))
        #expect(registry.currentController?.session.userInfo?.id == "nfc2")
        #expect(registry.existingController(for: nfd) == nil)
        await registry.shutdown()
    }

    /// Duplicate members, where the first is valid and the second is not. RFC 8259 leaves the meaning of such a
    /// document open and implementations disagree (Foundation keeps the first member, Python's `json` the last), so
    /// a proxy or a token cache may act on a different token than we do: every parser refuses them (StrictJSONScan),
    /// however the duplicate name is spelled (escaped, or canonically equivalent).
    // MARK: - Helpers

    static func expectCode(
        _ code: UserSessionError.Code,
        _ name: String = "",
        sourceLocation: SourceLocation = #_sourceLocation,
        _ body: () async throws -> Void
    ) async {
        do {
            try await body()
            Issue.record("\(name): no error, expected \(code)", sourceLocation: sourceLocation)
        } catch let error as UserSessionError {
            #expect(error.code == code, "\(name): \(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(name): untyped \(type(of: error)), expected \(code)", sourceLocation: sourceLocation)
        }
    }

    static func expectCodeNow(
        _ code: UserSessionError.Code,
        _ name: String,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ body: () throws -> Void
    ) {
        do {
            try body()
            Issue.record("\(name): no error, expected \(code)", sourceLocation: sourceLocation)
        } catch let error as UserSessionError {
            #expect(error.code == code, "\(name): \(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(name): untyped \(type(of: error)), expected \(code)", sourceLocation: sourceLocation)
        }
    }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        var result = self
        while result.count > 1, result.hasSuffix(suffix) { result.removeLast(suffix.count) }
        return result
    }
}
