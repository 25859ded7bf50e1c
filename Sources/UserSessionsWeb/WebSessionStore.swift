#if Hummingbird || Vapor
import Foundation

/// Where browser records live: ``InMemoryWebSessionStore`` (the default, one process),
/// ``FileWebSessionStore`` (the processes of one machine, across restarts) or `PostgresWebSessionStore` (a fleet,
/// with the PostgreSQL trait). Share one store across every instance that serves the same browsers.
///
/// Every record is keyed by a ``WebSessionKey`` (the hash of the cookie), never by the cookie itself.
/// Implementations must be safe to call concurrently and must throw ``WebSessionError`` (``WebSessionError/Code/storeCorrupt``
/// for a record they cannot read, ``WebSessionError/Code/storeFailure`` otherwise), never crash on bad data.
public protocol WebSessionStore: Sendable {
    /// Stores `record` under `key`, replacing any record there.
    func insert(_ record: WebSessionRecord, key: WebSessionKey) async throws

    /// The record stored under `key`, or `nil`.
    ///
    /// - Throws: ``WebSessionError/Code/storeCorrupt`` when the record cannot be read.
    func load(key: WebSessionKey) async throws -> WebSessionRecord?

    /// Sets the `lastSeenAt` of the record under `key`, if there is one.
    func touch(key: WebSessionKey, lastSeenAt: Date) async throws

    /// Removes the record under `key`, if any.
    func remove(key: WebSessionKey) async throws

    /// Removes every record of the user `identifier` (every browser the user signed in with); returns how many.
    @discardableResult
    func removeAll(identifier: String) async throws -> Int

    /// Removes every record that has ended at `now` (see ``WebSessionRecord/isExpired(at:idleTimeout:)``); returns
    /// how many.
    @discardableResult
    func removeExpired(now: Date, idleTimeout: Duration) async throws -> Int
}
#endif
