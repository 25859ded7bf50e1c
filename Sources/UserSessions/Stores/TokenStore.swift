/// Where credentials live between process runs (the "token caching strategy").
///
/// A store keeps one ``StoredSession`` per session identifier, plus the identifier of the current session that
/// ``UserSessionController/restore()`` uses. See the article "Implementing a TokenStore".
///
/// - Important: Every method may be called concurrently from many tasks. A save must be atomic: after a crash a
///   reader sees the old or the new value, never a mix. Throw ``UserSessionError`` with
///   ``UserSessionError/Code/storeCorrupt`` when stored data cannot be read back (and keep that data), and
///   ``UserSessionError/Code/storeFailure`` for I/O failures.
///
/// - Important: Identifiers are compared by their UTF-8 bytes and never normalized. `"caf\u{E9}"` (NFC) and
///   `"cafe\u{301}"` (NFD) are equal Swift strings but two different identifiers, as are other look-alikes: a store
///   must keep them apart (a `[String: …]` dictionary would merge them; key by the bytes, as the package's stores
///   do).
public protocol TokenStore: Sendable {
    /// Returns the stored session for `identifier`, or `nil` when nothing is stored.
    func load(identifier: String) async throws -> StoredSession?
    /// Stores `session` under `identifier`, replacing what was there.
    func save(_ session: StoredSession, identifier: String) async throws
    /// Removes what is stored under `identifier`. Removing nothing is not an error.
    func remove(identifier: String) async throws
    /// Returns the persisted identifier of the current session, or `nil`.
    func loadCurrentIdentifier() async throws -> String?
    /// Persists the identifier of the current session; `nil` removes it.
    func saveCurrentIdentifier(_ identifier: String?) async throws
    /// Lists the identifiers that have a stored session.
    func storedIdentifiers() async throws -> [String]
}
