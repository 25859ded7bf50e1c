import Foundation
import Testing

@testable import UserSessions

extension FileTokenStoreTests {
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
        let scratch = try FileStoreScratch()
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
        let scratch = try FileStoreScratch()
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
            + #"{"user_info": {"id": "u", "attributes": {}}, "credentials": {"version": 3, "access_token": "a"}}}"#,
    ])
    func newerFormatsAreRejectedAndKept(_ contents: String) async throws {
        let scratch = try FileStoreScratch()
        defer { scratch.remove() }
        let store = FileTokenStore(directory: scratch.url)
        let file = try tokenFileURL(store, "victim")
        try Data(contents.utf8).write(to: file)
        let error = await #expect(throws: UserSessionError.self) { try await store.load(identifier: "victim") }
        #expect(error?.code == .unsupportedFormatVersion)
        #expect(try String(contentsOf: file, encoding: .utf8) == contents)
    }

    @Test func corruptAndNewerCurrentIdentifierFilesAreTypedErrors() async throws {
        let scratch = try FileStoreScratch()
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

    @Test func aSymbolicLinkIsNeverFollowed() async throws {
        let scratch = try FileStoreScratch()
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
        let scratch = try FileStoreScratch()
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

    /// The one writer and reader of every file store of the package (tokens, OpenID Connect state, web sessions).
    @Test func privateFilesWriteAtomicallyAndReadBoundedWithoutFollowingLinks() throws {
        let scratch = try FileStoreScratch()
        defer { scratch.remove() }
        let directory = scratch.url.appending(path: "a/b").path(percentEncoded: false)
        try PrivateFiles.makeDirectory(directory)
        try PrivateFiles.writeAtomically(Array("first".utf8), to: "record", in: directory)
        try PrivateFiles.writeAtomically(Array("second".utf8), to: "record", in: directory)
        let path = directory + "/record"
        #expect(try PrivateFiles.readFile(path, limit: 6) == Array("second".utf8))
        #expect(try PrivateFiles.readFile(directory + "/missing", limit: 6) == nil)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int == 0o600)
        #expect(try FileManager.default.attributesOfItem(atPath: directory)[.posixPermissions] as? Int == 0o700)
        #expect(try PrivateFiles.listDirectory(directory) == ["record"], "no temporary file is left behind")

        let tooLarge = #expect(throws: FileTooLargeError.self) { try PrivateFiles.readFile(path, limit: 5) }
        #expect(tooLarge?.limit == 5)

        let outside = scratch.url.appending(path: "outside").path(percentEncoded: false)
        try Data("outside".utf8).write(to: URL(fileURLWithPath: outside))
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: outside)
        let link = #expect(throws: SystemCallError.self) { try PrivateFiles.readFile(path, limit: 64) }
        #expect(link?.isSymbolicLink == true)
        // A write replaces the link itself; the file it pointed to is untouched.
        try PrivateFiles.writeAtomically(Array("third".utf8), to: "record", in: directory)
        #expect(try String(contentsOfFile: outside, encoding: .utf8) == "outside")
        #expect(try PrivateFiles.readFile(path, limit: 64) == Array("third".utf8))
    }
}
