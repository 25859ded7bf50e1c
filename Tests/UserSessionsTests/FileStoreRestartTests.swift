import Foundation
import Testing

@testable import UserSessions

/// The embedded default across a process restart: a new store and a new controller on the same directory.
struct FileStoreRestartTests {
    private func makeDirectory() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("restart-\(UUID().uuidString)")
    }

    @Test func aNewControllerRestoresTheSessionFromRealFiles() async throws {
        let directory = makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let prototype = makePrototype("alice")

        let first = UserSessionController(store: FileTokenStore(directory: directory))
        _ = try await first.open(prototype)
        await first.shutdown()

        // "After the restart": nothing is shared with the first controller but the directory.
        let second = UserSessionController(store: FileTokenStore(directory: directory))
        #expect(await second.canRestore)
        let restored = try #require(try await second.restore())
        #expect(restored.state == .opened)
        #expect(restored.identifier == "alice")
        #expect(restored.userInfo == prototype.userInfo)
        #expect(second.credentials?.accessToken == prototype.credentials?.accessToken)
        #expect(second.credentials?.refreshToken == prototype.credentials?.refreshToken)

        try await second.closeAndClear()
        let third = UserSessionController(store: FileTokenStore(directory: directory))
        #expect(await !third.canRestore)
        #expect(try await third.restore() == nil)
    }

    @Test func aCorruptFileAfterARestartIsATypedErrorAndAnEventAndIsKept() async throws {
        let directory = makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let first = UserSessionController(store: FileTokenStore(directory: directory))
        _ = try await first.open(makePrototype("alice"))
        await first.shutdown()

        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix("u-") }
        let file = directory.appendingPathComponent(try #require(files.first))
        let original = try Data(contentsOf: file)
        let truncated = original.prefix(original.count / 2)
        try truncated.write(to: file)

        let second = UserSessionController(store: FileTokenStore(directory: directory))
        let probe = EventProbe(second)
        await #expect(throws: UserSessionError(.storeCorrupt, "")) { try await second.restore() }
        await probe.wait(for: .storeCorrupt(identifier: "alice"))
        #expect(second.session.state == .undefined)
        #expect(try Data(contentsOf: file) == truncated)  // kept for inspection, never deleted or rewritten
    }
}
