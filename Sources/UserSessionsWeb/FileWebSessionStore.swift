#if Hummingbird || Vapor
import Foundation
import Synchronization
import UserSessions

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A ``WebSessionStore`` in a directory: browsers stay signed in across restarts, and the server processes of one
/// machine share it. For a fleet of machines, use the PostgreSQL store.
///
/// Each record is one JSON file (mode 0600, in a folder of mode 0700) named by its ``WebSessionKey``'s hash, written
/// to a temporary file, synced to the disk and renamed into place, so a reader never sees half a record, even after
/// a crash. A file that cannot be read as a record (larger than 64 KiB, not a record, or a symbolic link planted in
/// its place, which is never followed) is reported as ``WebSessionError/Code/storeCorrupt``, never trusted.
public final class FileWebSessionStore: WebSessionStore {
    /// The directory of the records.
    public let directory: URL

    /// The records decoded last, under their key's hash, each with the exact bytes it was decoded from. A load whose
    /// file holds those same bytes returns the record without decoding it again (decoding was a fifth of a
    /// signed-in request's time); the file is still read at every load, so a record another process rewrote or
    /// removed is seen at once.
    private let decoded = Mutex<[String: (bytes: Data, record: WebSessionRecord)]>([:])

    /// The most records ``decoded`` holds; past it, an arbitrary one makes room.
    static let decodedLimit = 4_096

    /// A store in `directory` (created, mode 0700, when first written).
    public init(directory: URL) {
        self.directory = directory
    }

    private func file(_ key: WebSessionKey) -> URL { directory.appending(path: key.hash + ".json") }

    /// Stores `record` under `key`.
    public func insert(_ record: WebSessionRecord, key: WebSessionKey) async throws {
        let (data, file, directory) = (try record.encoded(), file(key), directory)
        try await BlockingIO.run { try Self.write(data, to: file, in: directory) }
    }

    /// The record under `key`, or `nil`.
    public func load(key: WebSessionKey) async throws -> WebSessionRecord? {
        let file = file(key)
        let data = try await BlockingIO.run { () throws(WebSessionError) -> Data? in try Self.read(file) }
        guard let data else {
            decoded.withLock { _ = $0.removeValue(forKey: key.hash) }
            return nil
        }
        if let known = decoded.withLock({ $0[key.hash] }), known.bytes == data { return known.record }
        let record = try WebSessionRecord.decode(data)
        decoded.withLock { records in
            if records.count >= Self.decodedLimit, records[key.hash] == nil, let any = records.keys.first {
                records.removeValue(forKey: any)
            }
            records[key.hash] = (data, record)
        }
        return record
    }

    /// Sets the `lastSeenAt` of the record under `key`, if it is there and readable.
    public func touch(key: WebSessionKey, lastSeenAt: Date) async throws {
        guard var record = try await load(key: key) else { return }
        record.lastSeenAt = max(record.lastSeenAt, lastSeenAt)
        let (data, file, directory) = (try record.encoded(), file(key), directory)
        try await BlockingIO.run {
            // Only a record that is still there is rewritten: a sign-out between the read and this write wins.
            guard PrivateFiles.exists(file.path(percentEncoded: false)) else { return }
            try Self.write(data, to: file, in: directory)
        }
    }

    /// Removes the record under `key`.
    public func remove(key: WebSessionKey) async throws {
        decoded.withLock { _ = $0.removeValue(forKey: key.hash) }
        let file = file(key)
        try await BlockingIO.run { try Self.remove(file) }
    }

    /// Removes every record of `identifier`; unreadable files are left for ``removeExpired(now:idleTimeout:)``.
    @discardableResult
    public func removeAll(identifier: String) async throws -> Int {
        try await removeRecords { record in record.identifier.utf8.elementsEqual(identifier.utf8) }
    }

    /// Removes every record that has ended at `now`, and every file that is not a readable record.
    @discardableResult
    public func removeExpired(now: Date, idleTimeout: Duration) async throws -> Int {
        try await removeRecords(removingUnreadable: true) { $0.isExpired(at: now, idleTimeout: idleTimeout) }
    }

    private func removeRecords(
        removingUnreadable: Bool = false, _ matches: @escaping @Sendable (WebSessionRecord) -> Bool
    ) async throws -> Int {
        let directory = directory
        return try await BlockingIO.run { () throws(WebSessionError) -> Int in
            let files: [URL]
            do {
                files = (try PrivateFiles.listDirectory(directory.path(percentEncoded: false)) ?? [])
                    .filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }.map { directory.appending(path: $0) }
            } catch {
                throw WebSessionError(.storeFailure, "cannot list the browser records")
            }
            var removed = 0
            for file in files {
                // A file that cannot be read as a record (too large, not JSON) never stops the others.
                let data: Data?
                do throws(WebSessionError) {
                    data = try Self.read(file)
                } catch {
                    if error.code == .storeFailure { throw error }
                    data = Data()
                }
                guard let data else { continue }
                let record = try? WebSessionRecord.decode(data)
                if record.map(matches) ?? removingUnreadable {
                    try Self.remove(file)
                    removed += 1
                }
            }
            return removed
        }
    }

    /// The largest record the store reads; a record is far smaller, so a larger file was not written by the store.
    static let maximumRecordSize = 64 * 1024

    /// The bytes of `file` (never through a symbolic link, at most 64 KiB), or `nil` when it is not there.
    private static func read(_ file: URL) throws(WebSessionError) -> Data? {
        do {
            return try PrivateFiles.readFile(file.path(percentEncoded: false), limit: maximumRecordSize)
                .map { Data($0) }
        } catch let error as FileTooLargeError {
            throw WebSessionError(.storeCorrupt, "a browser record is larger than \(error.limit / 1024) KiB")
        } catch let error as SystemCallError where error.isSymbolicLink {
            throw WebSessionError(.storeCorrupt, "a symbolic link stands in place of a browser record")
        } catch {
            throw WebSessionError(.storeFailure, "cannot read a browser record (\(error))")
        }
    }

    private static func remove(_ file: URL) throws(WebSessionError) {
        do {
            try PrivateFiles.removeFile(
                file.lastPathComponent, in: file.deletingLastPathComponent().path(percentEncoded: false))
        } catch {
            throw WebSessionError(.storeFailure, "cannot remove a browser record (\(error))")
        }
    }

    /// Replaces `file` with `data` atomically (mode 0600 in a folder of mode 0700, synced to the disk).
    private static func write(_ data: Data, to file: URL, in directory: URL) throws(WebSessionError) {
        let path = directory.path(percentEncoded: false)
        do {
            try PrivateFiles.makeDirectory(path)
        } catch {
            throw WebSessionError(.storeFailure, "cannot create the directory of the browser records (\(error))")
        }
        do {
            try PrivateFiles.writeAtomically([UInt8](data), to: file.lastPathComponent, in: path)
        } catch {
            throw WebSessionError(.storeFailure, "cannot write a browser record (\(error))")
        }
    }
}
#endif
