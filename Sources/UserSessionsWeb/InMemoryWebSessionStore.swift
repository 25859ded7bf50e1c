#if Hummingbird || Vapor
import Foundation
import UserSessions

/// A ``WebSessionStore`` in this process's memory: the default. Records end with the process, and other instances
/// do not see them; use ``FileWebSessionStore`` or the PostgreSQL store to keep browsers signed in across restarts
/// or a fleet.
public final class InMemoryWebSessionStore: WebSessionStore {
    private let records = Locked<[WebSessionKey: WebSessionRecord]>([:])

    /// An empty store.
    public init() {}

    /// Stores `record` under `key`.
    public func insert(_ record: WebSessionRecord, key: WebSessionKey) async throws {
        records.withLock { $0[key] = record }
    }

    /// The record under `key`, or `nil`.
    public func load(key: WebSessionKey) async throws -> WebSessionRecord? {
        records.withLock { $0[key] }
    }

    /// Sets the `lastSeenAt` of the record under `key`.
    public func touch(key: WebSessionKey, lastSeenAt: Date) async throws {
        records.withLock { $0[key]?.lastSeenAt = lastSeenAt }
    }

    /// Removes the record under `key`.
    public func remove(key: WebSessionKey) async throws {
        _ = records.withLock { $0.removeValue(forKey: key) }
    }

    /// Removes every record of `identifier`.
    @discardableResult
    public func removeAll(identifier: String) async throws -> Int {
        records.withLock { records in
            let keys = records.filter { $0.value.identifier.utf8.elementsEqual(identifier.utf8) }.map(\.key)
            for key in keys { records.removeValue(forKey: key) }
            return keys.count
        }
    }

    /// Removes every record that has ended at `now`.
    @discardableResult
    public func removeExpired(now: Date, idleTimeout: Duration) async throws -> Int {
        records.withLock { records in
            let keys = records.filter { $0.value.isExpired(at: now, idleTimeout: idleTimeout) }.map(\.key)
            for key in keys { records.removeValue(forKey: key) }
            return keys.count
        }
    }
}
#endif
