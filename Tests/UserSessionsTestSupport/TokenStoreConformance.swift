import Foundation
import UserSessions

/// Checks every `TokenStore` must pass. Copy them for a store of your own (see "Implementing a TokenStore").
///
/// Shared by the core tests and the PostgreSQL store's tests. A failed check throws ``Failure`` naming it (this
/// target is also linked into the benchmark, so it does not use Swift Testing's macros).
package enum TokenStoreConformance {
    package static let nastyToken = "a&b=c+d%e f\u{00e9}\u{1F510}/?#"

    /// A check that did not hold.
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    package static func sample(_ id: String, token: String = nastyToken) -> StoredSession {
        StoredSession(
            userInfo: UserInfo(id: id, email: "\(id)@example.com", name: "User \(id)"),
            credentials: Credentials(
                accessToken: token, refreshToken: "r-" + token,
                expiresAt: Date(timeIntervalSince1970: 1_900_000_000.5),
                lastRefreshedAt: Date(timeIntervalSince1970: 1_800_000_000.25), source: .refresh,
                grantedPermissions: ["read", "write"], declinedPermissions: ["admin"]))
    }

    private static func require(_ condition: Bool, _ what: String, line: Int = #line) throws {
        if !condition { throw Failure(description: "token store conformance check failed: \(what) (line \(line))") }
    }

    /// Round trips, replacement, removal, the current identifier and listing.
    package static func check(_ store: some TokenStore, lists: Bool = true) async throws {
        try require(try await store.load(identifier: "alice") == nil, "nothing stored at first")
        try await store.save(sample("alice"), identifier: "alice")
        guard let loaded = try await store.load(identifier: "alice") else {
            throw Failure(description: "token store conformance check failed: a saved session loads back")
        }
        try require(loaded.userInfo == sample("alice").userInfo, "the user reads back")
        try require(loaded.credentials?.accessToken == nastyToken, "the access token reads back")
        try require(loaded.credentials?.refreshToken == "r-" + nastyToken, "the refresh token reads back")
        try require(loaded.credentials?.grantedPermissions == ["read", "write"], "granted permissions read back")
        try require(loaded.credentials?.declinedPermissions == ["admin"], "declined permissions read back")
        let expiry = loaded.credentials?.expiresAt?.timeIntervalSince1970 ?? 0
        try require(abs(expiry - 1_900_000_000.5) < 0.001, "the expiry reads back")

        try await store.save(sample("alice", token: "second"), identifier: "alice")
        try require(
            try await store.load(identifier: "alice")?.credentials?.accessToken == "second", "a save replaces")
        try require(
            try await store.load(identifier: "alice")?.refreshTokenRefused == false, "a record reads as not refused")

        // The refusal of a refresh token is part of the record: every instance sharing the store must learn it.
        var refused = sample("alice", token: "refused")
        refused.refreshTokenRefused = true
        try await store.save(refused, identifier: "alice")
        try require(try await store.load(identifier: "alice") == refused, "a refused refresh token reads back refused")
        try await store.save(sample("alice", token: "second"), identifier: "alice")
        try require(
            try await store.load(identifier: "alice")?.refreshTokenRefused == false,
            "a later save without the refusal replaces it")

        try await store.save(sample("bob"), identifier: "bob")
        if lists {
            try require(try await store.storedIdentifiers().sorted() == ["alice", "bob"], "listing")
        }

        try await store.remove(identifier: "alice")
        try require(try await store.load(identifier: "alice") == nil, "a removed session is gone")
        try await store.remove(identifier: "alice")  // removing nothing is not an error
        try require(try await store.load(identifier: "bob") != nil, "removal touches nothing else")

        try require(try await store.loadCurrentIdentifier() == nil, "no current identifier at first")
        try await store.saveCurrentIdentifier("bob")
        try require(try await store.loadCurrentIdentifier() == "bob", "the current identifier reads back")
        try await store.saveCurrentIdentifier(nil)
        try require(try await store.loadCurrentIdentifier() == nil, "the current identifier can be cleared")
    }
}
