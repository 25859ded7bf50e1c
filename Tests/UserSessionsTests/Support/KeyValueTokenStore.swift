// The worked example of the article "Implementing a TokenStore", compiled and tested here so the article stays true.
// Keep the two in step.
import Foundation
import UserSessions

/// The part of a key-value client the store needs.
protocol KeyValueClient: Sendable {
    func get(_ key: String) async throws -> Data?
    func set(_ key: String, _ value: Data) async throws  // atomic per key
    func delete(_ key: String) async throws
    func keys(prefix: String) async throws -> [String]
}

final class KeyValueTokenStore: TokenStore {
    let client: any KeyValueClient
    let prefix = "user-sessions/"

    init(client: any KeyValueClient) {
        self.client = client
    }

    private func key(for identifier: String) throws -> String {
        guard !identifier.isEmpty, identifier.utf8.count <= 4096 else {
            throw UserSessionError(.invalidIdentifier, "identifier is empty or too long")
        }
        // Base64url keeps any identifier inside our prefix and reversible for storedIdentifiers().
        let encoded = Data(identifier.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        return prefix + "session/" + encoded
    }

    func load(identifier: String) async throws -> StoredSession? {
        let data: Data?
        do { data = try await client.get(try key(for: identifier)) } catch let error as UserSessionError {
            throw error
        } catch {
            throw UserSessionError(.storeFailure, "reading a session failed", underlying: error)
        }
        guard let data else { return nil }
        do {
            return try JSONDecoder().decode(StoredSession.self, from: data)
        } catch {
            // Keep the value: it may hold the only copy of a refresh token.
            throw UserSessionError(.storeCorrupt, "a stored session could not be decoded", underlying: error)
        }
    }

    func save(_ session: StoredSession, identifier: String) async throws {
        let data = try JSONEncoder().encode(session)
        do { try await client.set(try key(for: identifier), data) } catch let error as UserSessionError {
            throw error
        } catch {
            throw UserSessionError(.storeFailure, "writing a session failed", underlying: error)
        }
    }

    func remove(identifier: String) async throws {
        do { try await client.delete(try key(for: identifier)) } catch let error as UserSessionError {
            throw error
        } catch {
            throw UserSessionError(.storeFailure, "removing a session failed", underlying: error)
        }
    }

    func loadCurrentIdentifier() async throws -> String? {
        guard let data = try await client.get(prefix + "current") else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    func saveCurrentIdentifier(_ identifier: String?) async throws {
        if let identifier {
            try await client.set(prefix + "current", Data(identifier.utf8))
        } else {
            try await client.delete(prefix + "current")
        }
    }

    func storedIdentifiers() async throws -> [String] {
        try await client.keys(prefix: prefix + "session/").compactMap { key in
            let encoded = key.dropFirst(prefix.count + "session/".count)
                .replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            return Data(base64Encoded: encoded).map { String(decoding: $0, as: UTF8.self) }
        }
    }
}

/// An in-memory ``KeyValueClient`` for the example store.
final class InMemoryKeyValueClient: KeyValueClient {
    private let values = Locked<[String: Data]>([:])

    func get(_ key: String) async throws -> Data? { values.withLock { $0[key] } }
    func set(_ key: String, _ value: Data) async throws { values.withLock { $0[key] = value } }
    func delete(_ key: String) async throws { values.withLock { _ = $0.removeValue(forKey: key) } }
    func keys(prefix: String) async throws -> [String] {
        values.withLock { $0.keys.filter { $0.hasPrefix(prefix) }.sorted() }
    }
    /// Overwrites a raw value, to simulate corruption.
    func corrupt(_ key: String) { values.withLock { $0[key] = Data("{not json".utf8) } }
}
