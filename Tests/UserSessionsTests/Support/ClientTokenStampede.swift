import Foundation

@testable import UserSessions

/// `callers` tasks ask `tokens` for `key` at once while the token endpoint holds the one request they cause: once
/// every caller waits for it and `heldRequests` reports it held, `release` lets it through. Returns what each caller
/// got, in completion order.
func stampede(
    _ tokens: ClientCredentialsTokenManager, key: ClientCredentialsTokenManager.Key, callers: Int,
    heldRequests: () async throws -> Int, release: () async throws -> Void
) async throws -> [String] {
    try await withThrowingTaskGroup(of: String.self) { group in
        for _ in 0..<callers { group.addTask { try await tokens.accessToken(for: key) } }
        while tokens.waiterCount(key) < callers { await Task.yield() }
        while try await heldRequests() < 1 { await Task.yield() }
        try await release()
        return try await group.reduce(into: [String]()) { $0.append($1) }
    }
}
