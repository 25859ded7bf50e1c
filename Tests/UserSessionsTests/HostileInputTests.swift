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
    private static func makeFileStore() -> (root: URL, store: FileTokenStore) {
        let root = FileManager.default.temporaryDirectory.appending(path: "hostile-\(UUID().uuidString)")
        return (root, FileTokenStore(directory: root.appending(path: "tokens", directoryHint: .isDirectory)))
    }

    private static func session(_ identifier: String, index: Int) -> StoredSession {
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

    // MARK: - JSON

    /// 100,000 levels of arrays, then of objects.
    static let deepArrays = Data((String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)).utf8)
    static let deepObjects = Data(
        (String(repeating: "{\"a\":", count: 100_000) + "1" + String(repeating: "}", count: 100_000)).utf8)

    /// A 50 MB body that never closes its string.
    static let hugeUnterminated: Data = {
        var data = Data(#"{"result": {"user": {"id": ""#.utf8)
        data.append(Data(repeating: UInt8(ascii: "a"), count: 50 * 1024 * 1024))
        return data
    }()

    /// A 50 MB body of valid JSON: a top-level array, which no parser here accepts.
    static let hugeArray: Data = {
        var data = Data("[\"".utf8)
        data.append(Data(repeating: UInt8(ascii: "a"), count: 50 * 1024 * 1024))
        data.append(Data("\"]".utf8))
        return data
    }()

    static let signInCases: [(name: String, body: String, path: String?)] = [
        ("wrong type: id is a boolean", #"{"result": {"user": {"id": true}}}"#, "result.user.id"),
        ("wrong type: result is an array", #"{"result": []}"#, "result"),
        (
            "wrong type: access_token is a number", #"{"result": {"user": {"id": "u"}, "access_token": 5}}"#,
            "result.access_token"
        ),
        (
            "wrong type: expires_in is an object",
            #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": {}}}"#, "result.expires_in"
        ),
        (
            "wrong type: scope is a number", #"{"result": {"user": {"id": "u"}, "access_token": "a", "scope": 1}}"#,
            "result.scope"
        ),
        (
            "negative expires_in", #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": -1}}"#,
            "result.expires_in"
        ),
        (
            "negative expires_in as a string",
            #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": "-0.5"}}"#, "result.expires_in"
        ),
        (
            "huge expires_in", #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": 1e308}}"#,
            "result.expires_in"
        ),
        (
            "expires_in past Int64",
            #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": 9223372036854775808}}"#,
            "result.expires_in"
        ),
        (
            "expires_in past Double", #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": 1e999}}"#,
            nil
        ),
        (
            "expires_in as a huge string",
            #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": "99999999999999999999999"}}"#,
            "result.expires_in"
        ),
        (
            "expires_in as nan", #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": "nan"}}"#,
            "result.expires_in"
        ),
        ("a lone surrogate escape", #"{"result": {"user": {"id": "\ud800"}}}"#, nil),
    ]

    @Test func hostileSignInResponsesAreMalformedSignInResponseErrors() {
        var bodies: [(String, Data, String?)] = Self.signInCases.map { ($0.name, Data($0.body.utf8), $0.path) }
        bodies += [
            ("100,000 nested arrays", Self.deepArrays, nil), ("100,000 nested objects", Self.deepObjects, nil),
            ("50 MB unterminated string", Self.hugeUnterminated, nil), ("50 MB array", Self.hugeArray, nil),
        ]
        for (name, body, path) in bodies {
            do {
                let prototype = try UserSessionPrototype(signInResponse: body)
                Issue.record("\(name): parsed into \(prototype.identifier.prefix(20))")
            } catch let error as UserSessionError {
                #expect(error.code == .malformedSignInResponse, "\(name)")
                if let path { #expect(error.jsonPath == path, "\(name)") }
            } catch {
                Issue.record("\(name): untyped \(type(of: error))")
            }
        }
    }

    static let tokenFileCases: [(name: String, body: String)] = [
        ("format is a number", #"{"format": 5, "version": 1, "identifier": "u"}"#),
        ("version is a string", #"{"format": "swift-user-sessions.token", "version": "1", "identifier": "u"}"#),
        ("version is negative", #"{"format": "swift-user-sessions.token", "version": -1, "identifier": "u"}"#),
        (
            "version past Int64",
            #"{"format": "swift-user-sessions.token", "version": 99999999999999999999, "identifier": "u"}"#
        ),
        ("identifier is a number", #"{"format": "swift-user-sessions.token", "version": 1, "identifier": 7}"#),
        (
            "session is a string",
            #"{"format": "swift-user-sessions.token", "version": 1, "identifier": "u", "session": "x"}"#
        ),
        (
            "access token is a number",
            #"{"format":"swift-user-sessions.token","version":1,"identifier":"u","session":{"user_info":{"id":"u","attributes":{}},"credentials":{"access_token":1}}}"#
        ),
        (
            "expiry is a string",
            #"{"format":"swift-user-sessions.token","version":1,"identifier":"u","session":{"user_info":{"id":"u","attributes":{}},"credentials":{"access_token":"a","expires_at":"soon"}}}"#
        ),
        ("no session", #"{"format": "swift-user-sessions.token", "version": 1, "identifier": "u"}"#),
        (
            "another identifier",
            #"{"format":"swift-user-sessions.token","version":1,"identifier":"v","session":{"user_info":{"id":"u","attributes":{}}}}"#
        ),
        ("empty", ""), ("truncated", #"{"format":"swift-user-sessions.token","vers"#), ("NUL bytes", "\u{0}\u{0}"),
    ]

    @Test func hostileTokenFilesAreStoreCorruptErrors() async throws {
        let (root, store) = Self.makeFileStore()
        defer { try? FileManager.default.removeItem(at: root) }
        try await store.save(Self.session("u", index: 0), identifier: "u")  // creates the directory
        let file = store.directory.appending(path: try IdentifierEncoding.name(for: "u").value + ".json")
        var bodies: [(String, Data)] = Self.tokenFileCases.map { ($0.name, Data($0.body.utf8)) }
        bodies += [
            ("100,000 nested arrays", Self.deepArrays), ("100,000 nested objects", Self.deepObjects),
            ("50 MB unterminated string", Self.hugeUnterminated), ("50 MB array", Self.hugeArray),
        ]
        for (name, body) in bodies {
            try body.write(to: file)
            await Self.expectCode(.storeCorrupt, name) { _ = try await store.load(identifier: "u") }
            // The corrupt file is kept for inspection.
            #expect(try Data(contentsOf: file) == body, "\(name)")
        }
        // The same bytes as a current-identifier file.
        let current = store.directory.appending(path: FileTokenStore.currentIdentifierFileName)
        for (name, body) in bodies {
            try body.write(to: current)
            await Self.expectCode(.storeCorrupt, name) { _ = try await store.loadCurrentIdentifier() }
        }
    }

    static let remoteResponseCases: [(name: String, body: String)] = [
        ("status is a number", #"{"status": 1}"#), ("status is yes", #"{"status": "yes"}"#),
        ("no status", #"{"token_info": "{}"}"#), ("an array", #"["status", "true"]"#),
        ("a bare string", #""true""#),
    ]

    static let tokenInfoCases: [(name: String, body: String)] = [
        ("token_info is not JSON", "not json"), ("token_info is an array", "[1, 2]"),
        (
            "access token is a number",
            #"{"user_info": {"id": "u", "attributes": {}}, "credentials": {"access_token": 1}}"#
        ),
        (
            "date in another format",
            #"{"user_info": {"id": "u", "attributes": {}}, "credentials": {"access_token": "a", "expires_at": "1700000000"}}"#
        ),
        (
            "date out of range",
            #"{"user_info": {"id": "u", "attributes": {}}, "credentials": {"access_token": "a", "expires_at": "9999-99-99T99:99:99.999+9999"}}"#
        ),
    ]

    @Test func hostileRemoteResponsesAreTypedErrorsWithoutTheNetwork() {
        var responses: [(String, Data)] = Self.remoteResponseCases.map { ($0.name, Data($0.body.utf8)) }
        responses += [
            ("100,000 nested arrays", Self.deepArrays), ("100,000 nested objects", Self.deepObjects),
            ("50 MB unterminated string", Self.hugeUnterminated), ("50 MB array", Self.hugeArray),
            ("an HTML page", Data("<html><body>Maintenance</body></html>".utf8)),
            ("a truncated body", Data(#"{"status": "true", "token_in"#.utf8)),
        ]
        for (name, body) in responses {
            Self.expectCodeNow(.transportFailure, name) { _ = try RemoteTokenCacheProtocol.parseResponse(body) }
        }
        var tokenInfos = Self.tokenInfoCases.map { ($0.name, $0.body) }
        tokenInfos += [
            ("100,000 nested arrays", String(decoding: Self.deepArrays, as: UTF8.self)),
            ("100,000 nested objects", String(decoding: Self.deepObjects, as: UTF8.self)),
        ]
        for (name, tokenInfo) in tokenInfos {
            Self.expectCodeNow(.storeCorrupt, name) { _ = try RemoteTokenCacheProtocol.decodeSession(tokenInfo) }
            Self.expectCodeNow(.storeCorrupt, name) {
                _ = try RemoteTokenCacheProtocol.decodeCurrentIdentifier(tokenInfo)
            }
        }
    }

    /// A 9 MiB access token (a sign-in response accepts it) makes a session larger than the 8 MiB the file store
    /// reads back: the save is refused, so the failure shows when it happens, and nothing is written.
    @Test func aSessionTooLargeToReadBackIsRefusedWhenSaved() async throws {
        let (root, store) = Self.makeFileStore()
        defer { try? FileManager.default.removeItem(at: root) }
        let token = String(repeating: "t", count: 9 * 1024 * 1024)
        let body = #"{"result": {"user": {"id": "big"}, "access_token": ""# + token + #""}}"#
        let prototype = try UserSessionPrototype(signInResponse: Data(body.utf8))
        let session = StoredSession(userInfo: prototype.userInfo, credentials: prototype.credentials)
        // An earlier, small session under the same identifier survives the refused save.
        let small = Self.session("big", index: 1)
        try await store.save(small, identifier: "big")
        await Self.expectCode(.storeFailure, "save") { try await store.save(session, identifier: "big") }
        #expect(try await store.load(identifier: "big") == small)
        let names = try FileManager.default.contentsOfDirectory(atPath: store.directory.path(percentEncoded: false))
        #expect(names.count == 1, "\(names)")
        // Just under the limit is still written and read back.
        let fitting = String(repeating: "t", count: FileTokenStore.maximumFileSize - 4096)
        let fits = StoredSession(userInfo: UserInfo(id: "big"), credentials: Credentials(accessToken: fitting))
        try await store.save(fits, identifier: "big")
        #expect(try await store.load(identifier: "big") == fits)
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
    @Test func duplicateMembersAreTypedErrors() {
        do {
            _ = try UserSessionPrototype(signInResponse: Data(#"{"result": {"user": {"id": "u", "id": 1.5}}}"#.utf8))
            Issue.record("sign-in: parsed")
        } catch let error as UserSessionError {
            #expect(error.code == .malformedSignInResponse)
            #expect(error.jsonPath == "result.user.id")
        } catch {
            Issue.record("sign-in: untyped \(type(of: error))")
        }
        let signIns = [
            #"{"result": {"user": {"id": "u"}, "access_token": "a", "\u0061ccess_token": "b"}}"#,
            #"{"result": {"user": {"id": "u"}}, "result": {"user": {"id": "v"}}}"#,
            #"{"result": {"user": {"id": "u", "caf\u00e9": "x", "cafe\u0301": "y"}}}"#,
        ]
        for body in signIns {
            Self.expectCodeNow(.malformedSignInResponse, body) {
                _ = try UserSessionPrototype(signInResponse: Data(body.utf8))
            }
        }
        Self.expectCodeNow(.transportFailure, "remote response") {
            _ = try RemoteTokenCacheProtocol.parseResponse(Data(#"{"status": "true", "status": 1}"#.utf8))
        }
        Self.expectCodeNow(.transportFailure, "remote response, nested") {
            _ = try RemoteTokenCacheProtocol.parseResponse(
                Data(#"{"status": "true", "token_info": {"a": 1, "a": 2}}"#.utf8))
        }
        Self.expectCodeNow(.storeCorrupt, "token_info") {
            _ = try RemoteTokenCacheProtocol.decodeSession(
                #"{"user_info": {"id": "u", "attributes": {}}, "user_info": 5}"#)
        }
        Self.expectCodeNow(.storeCorrupt, "current identifier token_info") {
            _ = try RemoteTokenCacheProtocol.decodeCurrentIdentifier(
                #"{"current_identifier": "u", "current_identifier": "v"}"#)
        }
        Self.expectCodeNow(.storeCorrupt, "token file") {
            let file =
                #"{"format":"swift-user-sessions.token","format":1,"version":1,"identifier":"u","#
                + #""session":{"user_info":{"id":"u","attributes":{}}}}"#
            _ = try TokenFileCoding.decode(Array(file.utf8), format: FileTokenStore.tokenFileFormat, file: "f")
        }
        Self.expectCodeNow(.storeCorrupt, "token file, credentials") {
            let file =
                #"{"format":"swift-user-sessions.token","version":1,"identifier":"u","session":{"user_info":"#
                + #"{"id":"u","attributes":{}},"credentials":{"access_token":"a","access_token":"b"}}}"#
            _ = try TokenFileCoding.decode(Array(file.utf8), format: FileTokenStore.tokenFileFormat, file: "f")
        }
        let previous = Credentials(accessToken: "at-old", refreshToken: "rt-old")
        for body in [
            #"{"access_token": "a", "access_token": "b", "token_type": "Bearer"}"#,
            #"{"access_token": "a", "refresh_token": "r1", "refresh_token": "r2"}"#,
            #"{"access_token": "a", "\u0065xpires_in": 10, "expires_in": 3600}"#,
        ] {
            Self.expectCodeNow(.malformedTokenResponse, body) {
                _ = try OAuth2TokenResponse.credentials(
                    status: 200, body: Data(body.utf8), previous: previous, sentAt: Date(), secrets: [])
            }
        }
        // An error body with two codes is never read as invalid_grant (which would end the session).
        do {
            _ = try OAuth2TokenResponse.credentials(
                status: 400, body: Data(#"{"error": "invalid_grant", "error": "invalid_request"}"#.utf8),
                previous: previous, sentAt: Date(), secrets: [])
            Issue.record("an error body parsed into credentials")
        } catch let error as UserSessionError {
            #expect(error.code == .malformedTokenResponse)
            #expect(error.failureClass == .misconfiguration)
        } catch {
            Issue.record("untyped \(type(of: error))")
        }
    }

    // MARK: - HTTP

    @Test func hostileHTTPAnswersAreTypedErrorsFromTheRemoteStore() async throws {
        try await FixtureServer.run(script: "token_cache_server.py") { server in
            let store = try RemoteTokenStore(endpoint: server.url("/token_cache"))
            let session = Self.session("u", index: 0)
            func setMode(_ mode: String) async throws {
                let url = try #require(URL(string: server.url("/__control").absoluteString + "?mode=" + mode))
                _ = try await URLSession.shared.data(from: url)
            }
            func setCanned(_ body: Data) async throws {
                var request = URLRequest(url: server.url("/__canned"))
                request.httpMethod = "POST"
                request.httpBody = body
                _ = try await URLSession.shared.data(for: request)
            }

            // A 200 with an HTML page, and a body cut short of its Content-Length.
            for mode in ["html", "truncated"] {
                try await setMode(mode)
                await Self.expectCode(.transportFailure, mode) { _ = try await store.load(identifier: "u") }
                await Self.expectCode(.transportFailure, mode) { try await store.save(session, identifier: "u") }
                await Self.expectCode(.transportFailure, mode) { _ = try await store.loadCurrentIdentifier() }
            }

            // Complete HTTP answers with hostile bodies.
            try await setMode("canned")
            let nested = "{\"status\": \"true\", \"token_info\": \"" + String(repeating: "[", count: 100_000) + "\"}"
            let cannedCases: [(String, Data, UserSessionError.Code)] = [
                ("a JSON body cut short", Data(#"{"status": "true", "token_in"#.utf8), .transportFailure),
                ("100,000 nested arrays", Self.deepArrays, .transportFailure),
                ("50 MB unterminated string", Self.hugeUnterminated, .transportFailure),
                ("100,000 nested arrays inside token_info", Data(nested.utf8), .storeCorrupt),
                ("token_info of another shape", Data(#"{"status": "true", "token_info": "[1]"}"#.utf8), .storeCorrupt),
                ("a status of the wrong type", Data(#"{"status": 1, "token_info": "{}"}"#.utf8), .transportFailure),
            ]
            for (name, body, code) in cannedCases {
                try await setCanned(body)
                await Self.expectCode(code, name) { _ = try await store.load(identifier: "u") }
            }
        }
    }

    /// Hostile token endpoints, through a real `OAuth2TokenRefresher` against the OAuth fixture: each answer is a
    /// typed, classified error (or, for a huge `expires_in`, the documented clamp to 100 years). A redirect to the
    /// same host and another path is covered by the shared transport suite (`TransportCheck`);
    /// `aRedirectToAnotherHostNeverCarriesTheRefreshTokenOrTheSecret` below sends it to another host.
    @Test func hostileTokenEndpointAnswersAreTypedErrorsFromTheRefresher() async throws {
        let cases: [(String, [String: Any], [UserSessionError.Code])] = [
            ("a 200 with an HTML page", ["mode": "garbage"], [.malformedTokenResponse]),
            // Cut short of its Content-Length: the transport reports the lost connection (or, if it hands over
            // what arrived, the parser refuses the cut JSON).
            ("a body cut short", ["mode": "truncated"], [.transportFailure, .malformedTokenResponse]),
            ("100,000 nested arrays", ["mode": "nested"], [.malformedTokenResponse]),
            ("a 50 MB token response", ["mode": "huge"], [.malformedTokenResponse]),
            ("a negative expires_in", ["mode": "normal", "expires_in": -5], [.malformedTokenResponse]),
            ("a negative expires_in string", ["mode": "normal", "expires_in": "-1"], [.malformedTokenResponse]),
            ("an infinite expires_in", ["mode": "normal", "expires_in": "1e999"], [.malformedTokenResponse]),
            ("an expires_in that is not a number", ["mode": "normal", "expires_in": [1]], [.malformedTokenResponse]),
        ]
        try await OAuthFixtureServer.with { server in
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"))
            for (name, settings, codes) in cases {
                try await server.configure(settings)
                let (refreshToken, accessToken) = try await server.issue()
                let previous = Credentials(accessToken: accessToken, refreshToken: refreshToken)
                do {
                    _ = try await refresher.refresh(previous)
                    Issue.record("\(name): refreshed")
                } catch let error as UserSessionError {
                    #expect(codes.contains(error.code), "\(name): \(error)")
                    #expect(error.failureClass == .transient, "\(name): \(error)")
                    for secret in [refreshToken, accessToken, "client-secret"] {
                        #expect(!"\(error)".contains(secret), "\(name) shows a secret")
                    }
                    if name.hasPrefix("a 50 MB") {
                        #expect(error.message.contains("larger than"), "\(name): read past the size limit")
                    }
                } catch {
                    Issue.record("\(name): untyped \(type(of: error))")
                }
            }

            // Huge lifetimes are clamped to 100 years from when the request was sent, never overflowing a Date.
            let time = ManualTime()
            let clocked = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"), clock: time.clock)
            for huge: Any in [1e300, "99999999999999999999999999999999", 9_223_372_036_854_775_807] {
                try await server.configure(["mode": "normal", "expires_in": huge])
                let (refreshToken, accessToken) = try await server.issue()
                let refreshed = try await clocked.refresh(
                    Credentials(accessToken: accessToken, refreshToken: refreshToken))
                #expect(refreshed.expiresAt == time.now.addingTimeInterval(OAuth2TokenResponse.maximumLifetime))
            }
        }
    }

    /// A token endpoint that takes its time: cancelling the refreshing task cancels the request at once (the
    /// transport does not wait for the answer) and the error is classified `cancelled`.
    @Test func cancellingASlowRefreshCancelsItsRequest() async throws {
        try await OAuthFixtureServer.with { server in
            try await server.configure(["mode": "normal", "delay": 30])
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"))
            let (refreshToken, accessToken) = try await server.issue()
            let refreshing = Task {
                try await refresher.refresh(Credentials(accessToken: accessToken, refreshToken: refreshToken))
            }
            // The request has arrived (and sleeps in the server) once the counter moves.
            while try await server.stats().tokenRequests == 0 { await Task.yield() }
            refreshing.cancel()
            do {
                _ = try await refreshing.value
                Issue.record("the refresh finished")
            } catch let error as UserSessionError {
                #expect(error.failureClass == .cancelled, "\(error)")
            }
        }
    }

    /// A 307 to another host name for the same server: a client that followed it could re-send the form body with
    /// the refresh token, and the Basic client credentials, there. The refresher never follows it. The control: a
    /// following client (`URLSession.shared`, which on Linux drops a 307's body but keeps the `Authorization`
    /// header) does reach the other host with the client secret, so the fixture would see a leak.
    @Test func aRedirectToAnotherHostNeverCarriesTheRefreshTokenOrTheSecret() async throws {
        try await OAuthFixtureServer.with { server in
            func stats() async throws -> [String: Any] {
                let (data, _) = try await URLSession.shared.data(from: server.baseURL.appendingPathComponent("stats"))
                return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
            }
            try await server.configure(["mode": "redirect_other_host"])
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"))
            let (refreshToken, accessToken) = try await server.issue()
            do {
                _ = try await refresher.refresh(Credentials(accessToken: accessToken, refreshToken: refreshToken))
                Issue.record("refreshed through a redirect")
            } catch let error as UserSessionError {
                #expect(error.code == .refreshFailed && error.failureClass == .transient, "\(error)")
            }
            var counters = try await stats()
            #expect(counters["redirect_target_hits"] as? Int == 0)
            #expect(counters["redirect_target_saw_secret"] as? Int == 0)

            // The control: a client that follows redirects takes the client credentials to the other host.
            var request = URLRequest(url: server.tokenEndpoint)
            request.httpMethod = "POST"
            request.httpBody = Data("grant_type=refresh_token&refresh_token=\(refreshToken)".utf8)
            request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
            request.setValue("Basic Y2xpZW50OmNsaWVudC1zZWNyZXQ=", forHTTPHeaderField: "Authorization")
            _ = try? await URLSession.shared.data(for: request)
            counters = try await stats()
            #expect(counters["redirect_target_hits"] as? Int == 1)
            #expect(counters["redirect_target_saw_secret"] as? Int == 1)
        }
    }

    // MARK: - Helpers

    private static func expectCode(
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

    private static func expectCodeNow(
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
