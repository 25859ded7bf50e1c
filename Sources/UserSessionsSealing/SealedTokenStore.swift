#if Sealing
import UserSessions

/// A `TokenStore` that keeps the secrets of every record sealed with AES-256-GCM in another store.
///
/// Wrap any store: `SealedTokenStore(base: FileTokenStore(directory: …), keyRing: ring, namespace: "my-app")`.
/// When the base store is a `CoordinatedTokenStore` (the file store, the PostgreSQL store), the
/// wrapper is one too, with the same revisions, lease and change notifications, so a fleet still refreshes once per
/// expiry.
///
/// - Each save seals the credentials with the ring's current key under a fresh nonce; the base store sees a
///   `StoredSession` whose access token is the sealed form and whose refresh token is absent (the
///   format is described in the article "Sealing tokens at rest"). The user info, the expiry and the other
///   non-secret fields stay readable, and the identifier, the current identifier and the revisions are the base
///   store's own.
/// - Each load opens the record with the ring's key it names. The namespace and the identifier are authenticated
///   with it, so a record copied to another identifier (or another namespace) does not open.
/// - A record that does not open (a key missing from the ring, altered bytes, a copy, credentials in the clear)
///   throws `UserSessionError.Code.storeCorrupt` with a ``SealedRecordProblem`` as the underlying
///   error. The wrapper never deletes or rewrites it, and never answers "nothing stored" for it; a controller's
///   `restore()` reports it and keeps it.
///
/// - Note: A class, so that every controller given this instance shares one owner of each user's credentials (the
///   refresh in flight, unwritten writes, the sign-out fence), as with any other store instance.
/// - Important: Sealing protects records at rest: backups, replicas, the token cache's data directory, a copied
///   database. A process that holds the key ring reads every token, as the application itself must.
public final class SealedTokenStore<Base: TokenStore>: TokenStore, CustomStringConvertible, CustomReflectable {
    /// The store that holds the sealed records.
    public let base: Base
    /// The keys records are sealed and opened with.
    public let keyRing: SealingKeyRing
    /// The namespace every record is bound to (authenticated with it, never stored by the wrapper).
    public let namespace: String
    /// Whether records whose credentials are in the clear load as they are (to move a store to sealing) instead of
    /// throwing ``SealedRecordProblem/notSealed``.
    public let acceptsUnsealedRecords: Bool

    /// Seals the records of `base` with `keyRing`, bound to `namespace`.
    ///
    /// - Parameters:
    ///   - base: The store that keeps the sealed records.
    ///   - keyRing: The keys: writes seal with its current key, loads open with the key a record names.
    ///   - namespace: Names the application or tenant the records belong to, such as `"billing-prod"`. A record
    ///     opens only under the namespace it was written with: keep it stable, and give stores that must never
    ///     exchange records different namespaces.
    ///   - acceptsUnsealedRecords: For turning sealing on over a store that already holds records: `true` loads a
    ///     record whose credentials are in the clear as it is, and it is sealed on its next write or by
    ///     ``resealAll()``. Turn it off once ``resealAll()`` is complete: while it is on, whoever can write the store
    ///     can plant credentials in the clear. Default `false`: such a record is refused.
    public init(base: Base, keyRing: SealingKeyRing, namespace: String, acceptsUnsealedRecords: Bool = false) {
        self.base = base
        self.keyRing = keyRing
        self.namespace = namespace
        self.acceptsUnsealedRecords = acceptsUnsealedRecords
    }

    public func load(identifier: String) async throws -> StoredSession? {
        try await base.load(identifier: identifier).map { try open($0, identifier: identifier) }
    }

    public func save(_ session: StoredSession, identifier: String) async throws {
        try await base.save(try seal(session, identifier: identifier), identifier: identifier)
    }

    public func remove(identifier: String) async throws {
        try await base.remove(identifier: identifier)
    }

    public func loadCurrentIdentifier() async throws -> String? {
        try await base.loadCurrentIdentifier()
    }

    public func saveCurrentIdentifier(_ identifier: String?) async throws {
        try await base.saveCurrentIdentifier(identifier)
    }

    public func storedIdentifiers() async throws -> [String] {
        try await base.storedIdentifiers()
    }

    /// The sealed form of `session` for `identifier`, as the base store receives it.
    func seal(_ session: StoredSession, identifier: String) throws -> StoredSession {
        guard let credentials = session.credentials else { return session }
        var sealed = session
        sealed.credentials = try SealedRecordFormat.seal(
            credentials, identifier: identifier, namespace: namespace, key: keyRing.current)
        return sealed
    }

    /// The opened form of `stored`, a record the base store holds under `identifier`.
    func open(_ stored: StoredSession, identifier: String) throws -> StoredSession {
        guard let credentials = stored.credentials else { return stored }
        if acceptsUnsealedRecords, !SealedRecordFormat.isSealed(credentials) { return stored }
        var opened = stored
        opened.credentials = try SealedRecordFormat.open(
            credentials, identifier: identifier, namespace: namespace, ring: keyRing)
        return opened
    }

    /// Whether `stored` (as the base store holds it) is sealed with the current key already.
    func isSealedWithCurrentKey(_ stored: StoredSession) -> Bool {
        guard let credentials = stored.credentials else { return true }
        return SealedRecordFormat.keyID(of: credentials) == keyRing.current.id
    }

    public var description: String { "SealedTokenStore(namespace: \(namespace), keys: \(keyRing.keyIDs))" }
    public var customMirror: Mirror {
        Mirror(self, children: ["namespace": namespace, "keyIDs": keyRing.keyIDs], displayStyle: .struct)
    }
}
#endif
