import Foundation
import Testing

@testable import UserSessions

struct SessionDirectoriesTests {
    private func makeRoot() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("session-dirs-\(UUID().uuidString)")
    }

    private func mode(_ url: URL) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: url.path)
        return try #require(attributes[.posixPermissions] as? Int)
    }

    @Test func openCreatesPrivateDirectoriesAndCloseAndClearRemovesThem() async throws {
        let root = makeRoot()
        defer { try? FileManager.default.removeItem(at: root) }
        let directories = SessionDirectories(root: root)
        let controller = UserSessionController(
            store: InMemoryTokenStore(), configuration: .init(dataDirectories: directories))
        _ = try await controller.open(makePrototype("alice"))
        let documents = try directories.documentsDirectory(for: "alice")
        let caches = try directories.cachesDirectory(for: "alice")
        #expect(FileManager.default.fileExists(atPath: documents.path))
        #expect(FileManager.default.fileExists(atPath: caches.path))
        #expect(try mode(documents) == 0o700)
        #expect(try mode(directories.sessionDirectory(for: "alice")) == 0o700)
        try Data("note".utf8).write(to: documents.appendingPathComponent("note.txt"))

        await controller.close()
        #expect(FileManager.default.fileExists(atPath: documents.appendingPathComponent("note.txt").path))

        _ = try await controller.restore(identifier: "alice")
        try await controller.closeAndClear()
        #expect(!FileManager.default.fileExists(atPath: try directories.sessionDirectory(for: "alice").path))
        try await controller.closeAndClear()  // idempotent
    }

    @Test func identifiersNeverShareOrEscapeTheRoot() async throws {
        let root = makeRoot()
        defer { try? FileManager.default.removeItem(at: root) }
        let directories = SessionDirectories(root: root)
        let hostile = ["..", ".", "../../etc/passwd", "a/b", "a\\b", "A", "a", String(repeating: "x", count: 10_000)]
        var seen: Set<String> = []
        for identifier in hostile {
            try await directories.createDirectories(for: identifier)
            let directory = try directories.sessionDirectory(for: identifier).standardizedFileURL
            #expect(directory.deletingLastPathComponent().path == root.standardizedFileURL.path)
            #expect(seen.insert(directory.lastPathComponent).inserted)
        }
        let entries = try FileManager.default.contentsOfDirectory(atPath: root.path)
        #expect(entries.count == hostile.count)
        for identifier in hostile { try await directories.removeDirectories(for: identifier) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.path).isEmpty)
        // Removing what is not there is not an error.
        try await directories.removeDirectories(for: "a")
        #expect(throws: UserSessionError(.invalidIdentifier, "")) { try directories.create(for: "a\u{0}b") }
        #expect(throws: UserSessionError(.invalidIdentifier, "")) { try directories.create(for: "") }
    }
}

struct RegistrySessionDirectoriesTests {
    @Test func registryClearsTheDataOfAUserWithoutALiveController() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("registry-dirs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let directories = SessionDirectories(root: root)
        let registry = UserSessionRegistry(
            store: InMemoryTokenStore(), configuration: .init(dataDirectories: directories))
        try await registry.open(makePrototype("alice"))
        await registry.close(identifier: "alice")  // evicted: no controller holds alice any more
        #expect(registry.existingController(for: "alice") == nil)
        #expect(FileManager.default.fileExists(atPath: try directories.sessionDirectory(for: "alice").path))

        try await registry.closeAndClear(identifier: "alice")
        #expect(!FileManager.default.fileExists(atPath: try directories.sessionDirectory(for: "alice").path))
        #expect(try await registry.storedIdentifiers() == [])
    }
}
