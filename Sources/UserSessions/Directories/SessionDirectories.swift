import Foundation

/// Per-session documents and caches directories under one root: the server analogue of an app's per-user
/// Documents and Caches folders.
///
/// Each identifier gets `ROOT/<encoded identifier>/Documents` and `ROOT/<encoded identifier>/Caches`. The encoded
/// form (the one ``FileTokenStore`` uses) contains only `[a-z0-9_-]`, so a hostile identifier (`..`, `a/b`,
/// NUL, very long strings) can never name a directory outside its own, and two identifiers never share one.
/// Directories are created with mode `0700`.
///
/// Give it to ``UserSessionController/Configuration/dataDirectories``: the controller creates a session's
/// directories when it opens and removes them in ``UserSessionController/closeAndClear()``.
///
/// ``createDirectories(for:)`` and ``removeDirectories(for:)`` do their file-system work on a dispatch queue, off the
/// caller's actor and the cooperative thread pool; the controller uses them. ``create(for:)`` and ``remove(for:)``
/// are their blocking forms, for synchronous code.
public struct SessionDirectories: Sendable, Hashable {
    /// The directory that holds one directory per session identifier.
    public var root: URL

    /// Creates a layout under `root`. Nothing is created until ``create(for:)``.
    public init(root: URL) {
        self.root = root
    }

    /// The directory holding everything of `identifier`'s session.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier`` for an empty identifier or one containing NUL.
    public func sessionDirectory(for identifier: String) throws -> URL {
        root.appendingPathComponent(try IdentifierEncoding.name(for: identifier).value, isDirectory: true)
    }

    /// The documents directory of `identifier`'s session (kept until ``remove(for:)``).
    public func documentsDirectory(for identifier: String) throws -> URL {
        try sessionDirectory(for: identifier).appendingPathComponent("Documents", isDirectory: true)
    }

    /// The caches directory of `identifier`'s session (its contents may be recreated at any time).
    public func cachesDirectory(for identifier: String) throws -> URL {
        try sessionDirectory(for: identifier).appendingPathComponent("Caches", isDirectory: true)
    }

    /// Creates both directories of `identifier`'s session (mode `0700`) if they do not exist, on a dispatch queue.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier``, or ``UserSessionError/Code/storeFailure`` when the
    ///   file system refuses.
    public func createDirectories(for identifier: String) async throws {
        try await BlockingIO.run { [self] in try create(for: identifier) }
    }

    /// Removes `identifier`'s session directory and everything in it, on a dispatch queue. Removing nothing is not
    /// an error.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier``, or ``UserSessionError/Code/storeFailure`` when the
    ///   file system refuses.
    public func removeDirectories(for identifier: String) async throws {
        try await BlockingIO.run { [self] in try remove(for: identifier) }
    }

    /// Creates both directories of `identifier`'s session (mode `0700`) if they do not exist, blocking the calling
    /// thread; from async code use ``createDirectories(for:)``.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier``, or ``UserSessionError/Code/storeFailure`` when the
    ///   file system refuses.
    public func create(for identifier: String) throws {
        for directory in [try documentsDirectory(for: identifier), try cachesDirectory(for: identifier)] {
            do {
                try FileManager.default.createDirectory(
                    at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw UserSessionError(
                    .storeFailure, "could not create a session data directory", underlying: error)
            }
        }
        // Intermediate directories (the root, the session's own) get the same private mode.
        for directory in [root, try sessionDirectory(for: identifier)] {
            try? FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory.path)
        }
    }

    /// Removes `identifier`'s session directory and everything in it, blocking the calling thread; from async code
    /// use ``removeDirectories(for:)``. Removing nothing is not an error.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier``, or ``UserSessionError/Code/storeFailure`` when the
    ///   file system refuses.
    public func remove(for identifier: String) throws {
        let directory = try sessionDirectory(for: identifier)
        guard FileManager.default.fileExists(atPath: directory.path) else { return }
        do {
            try FileManager.default.removeItem(at: directory)
        } catch {
            throw UserSessionError(.storeFailure, "could not remove a session data directory", underlying: error)
        }
    }
}
