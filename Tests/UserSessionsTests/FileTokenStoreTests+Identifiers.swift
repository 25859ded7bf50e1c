import Foundation
import Testing

@testable import UserSessions

extension FileTokenStoreTests {
    @Test func hostileIdentifiersNeverEscapeTheDirectory() async throws {
        let scratch = try FileStoreScratch()
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
        let scratch = try FileStoreScratch()
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

    @Test func currentIdentifierRoundTripsAndIsRemovedByNil() async throws {
        let scratch = try FileStoreScratch()
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

    @Test func listingSkipsTemporaryUnrelatedAndUnreadableHashedFiles() async throws {
        let scratch = try FileStoreScratch()
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
        let scratch = try FileStoreScratch()
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

}
