import Dispatch
import Foundation
import Synchronization

/// The embedded default ``TokenStore``: one file per identifier in a private directory.
///
/// - Files: each identifier's session lives in its own file, named by a traversal-proof encoding of the identifier
///   that uses only `[a-z0-9_-]` (`u-…json`), or by a 128-bit hash of it when the encoding would be longer than
///   200 bytes (`h-…json`). The file also records the full identifier, so a hash collision is detected, never
///   trusted. The current identifier lives in `current-identifier.json`. Identifiers that are empty, contain NUL
///   or are longer than 64 KiB are rejected with ``UserSessionError/Code/invalidIdentifier``.
/// - Format: versioned JSON,
///   `{"format": "swift-user-sessions.token", "version": 2, "identifier": "…", "revision": 7, "session": {…}}`
///   with sorted keys. `revision` grows with every write (version-1 files have none and read as revision 1).
///   Dates are numbers of seconds since 2001-01-01T00:00:00Z, written so that they read back exactly.
/// - Atomicity: a save writes a uniquely named temporary file (`.tmp-…`, created with `O_EXCL`, mode `0600`),
///   `fsync`s it, renames it over the target and `fsync`s the directory. After a crash a reader sees the old or
///   the new file, never a mix. Concurrent saves of one identifier each use their own temporary file; the last
///   rename wins.
/// - Leftovers: a writer killed between creating its temporary file and renaming it leaves the temporary file
///   behind; reads and listings ignore it. The first call on each store instance removes the `.tmp-…` regular
///   files in the directory that were last modified more than 5 minutes ago. A live
///   save keeps its temporary file for milliseconds (create, write, sync, rename in one call), so only a writer
///   stalled for minutes in between could lose its file to another process's sweep: its rename then fails and the
///   save throws ``UserSessionError/Code/storeFailure``, with the previous file intact.
/// - Size: files larger than 8 MiB are never read (they are ``UserSessionError/Code/storeCorrupt``), so a session
///   whose file would be larger is refused by ``save(_:identifier:)`` rather than written and then unreadable.
/// - Permissions: files are `0600`. The directory and any missing parents are created with mode `0700` on the
///   first save; a directory that already exists keeps its permissions (the store never loosens or tightens
///   directories it did not create).
/// - Corruption: a corrupt, truncated or foreign file makes ``load(identifier:)`` throw
///   ``UserSessionError/Code/storeCorrupt`` and is left untouched for inspection; only ``save(_:identifier:)`` and
///   ``remove(identifier:)`` replace or delete it.
///
/// The store is a ``CoordinatedTokenStore`` (an advisory `flock` lease per identifier, revisions, conditional
/// writes): processes sharing the directory refresh once per expiry between them; see
/// `FileTokenStore+Coordination.swift` and the article "Implementing a TokenStore".
///
/// The blocking file system calls run on a private dispatch queue, never on the caller's thread. A call that has
/// started runs to completion even when the calling task is cancelled; none of them waits on anything but the
/// file system and, for a write, the directory's write lock (held by another writer for one write). Waiting for
/// the refresh lease sleeps between attempts and ends when the waiting task is cancelled.
public final class FileTokenStore: TokenStore {
    /// The directory holding the files.
    public let directory: URL
    let path: String
    let queue = DispatchQueue(label: "UserSessions.FileTokenStore", attributes: .concurrent)
    /// Whether the first call has swept stale temporary files yet.
    private let hasSwept = Atomic(false)

    /// Temporary files last modified longer ago than this many seconds are leftovers of dead writers, removed by
    /// the first call on a store instance: 5 minutes.
    static let staleTemporaryFileAge = 300

    /// The name of the file that holds the current identifier.
    static let currentIdentifierFileName = "current-identifier.json"

    /// Creates a store in `directory`. Nothing touches the disk until the first call; the directory is created
    /// (mode `0700`) by the first save.
    public init(directory: URL) {
        self.directory = directory
        var path = directory.standardizedFileURL.path(percentEncoded: false)
        while path.count > 1, path.hasSuffix("/") { path.removeLast() }
        self.path = path
    }

    /// The conventional per-user location: `$XDG_DATA_HOME/UserSessions/tokens` (or
    /// `~/.local/share/UserSessions/tokens` when `XDG_DATA_HOME` is unset or not absolute) on Linux, and
    /// `~/Library/Application Support/UserSessions/tokens` on Apple platforms. It is not created here.
    public static func defaultDirectory() -> URL {
        #if canImport(Darwin)
        let base =
            FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first
            ?? FileManager.default.homeDirectoryForCurrentUser.appending(path: "Library/Application Support")
        return base.appending(path: "UserSessions/tokens", directoryHint: .isDirectory)
        #else
        return defaultDirectory(
            environment: ProcessInfo.processInfo.environment,
            home: FileManager.default.homeDirectoryForCurrentUser
        )
        #endif
    }

    static func defaultDirectory(environment: [String: String], home: URL) -> URL {
        let base: URL
        if let dataHome = environment["XDG_DATA_HOME"], dataHome.hasPrefix("/") {
            base = URL(fileURLWithPath: dataHome, isDirectory: true)
        } else {
            base = home.appending(path: ".local/share", directoryHint: .isDirectory)
        }
        return base.appending(path: "UserSessions/tokens", directoryHint: .isDirectory)
    }

    /// Returns the stored session for `identifier`, or `nil` when no file exists for it.
    ///
    /// - Throws: ``UserSessionError`` with ``UserSessionError/Code/invalidIdentifier`` for an unusable identifier;
    ///   ``UserSessionError/Code/storeCorrupt`` for a corrupt, truncated or foreign file (which is kept);
    ///   ``UserSessionError/Code/unsupportedFormatVersion`` for a file written by a newer release;
    ///   ``UserSessionError/Code/storeFailure`` for I/O errors (with the system error as `underlying`) and for a
    ///   hashed file name that belongs to another identifier.
    public func load(identifier: String) async throws -> StoredSession? {
        let name = try IdentifierEncoding.name(for: identifier)
        return try await run { try self.loadNow(identifier: identifier, name: name) }
    }

    /// Atomically replaces the file for `identifier` with `session`, creating the directory when needed.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier`` for an unusable identifier;
    ///   ``UserSessionError/Code/storeFailure`` when writing fails (nothing of the old file is lost), when a
    ///   hashed file name is taken by another identifier, or when the file would be larger than the 8 MiB that
    ///   ``load(identifier:)`` reads (nothing is written).
    public func save(_ session: StoredSession, identifier: String) async throws {
        let name = try IdentifierEncoding.name(for: identifier)
        try await run { _ = try self.saveNow(session, identifier: identifier, name: name, expectedRevision: nil) }
    }

    /// Deletes the file for `identifier`, whatever its content. Removing nothing is not an error.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier`` for an unusable identifier;
    ///   ``UserSessionError/Code/storeFailure`` when deleting fails.
    public func remove(identifier: String) async throws {
        let name = try IdentifierEncoding.name(for: identifier)
        try await run { try self.removeNow(identifier: identifier, name: name) }
    }

    /// Returns the identifier stored by ``saveCurrentIdentifier(_:)``, or `nil`.
    ///
    /// - Throws: ``UserSessionError/Code/storeCorrupt`` when the file is corrupt (it is kept);
    ///   ``UserSessionError/Code/unsupportedFormatVersion`` for a newer format;
    ///   ``UserSessionError/Code/storeFailure`` for I/O errors.
    public func loadCurrentIdentifier() async throws -> String? {
        try await run { try self.loadCurrentIdentifierNow() }
    }

    /// Atomically stores the current identifier in its own file; `nil` deletes that file.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier`` for an unusable identifier;
    ///   ``UserSessionError/Code/storeFailure`` for I/O errors.
    public func saveCurrentIdentifier(_ identifier: String?) async throws {
        guard let identifier else {
            try await run {
                try self.mapErrors(file: "the current-identifier file") {
                    try PrivateFiles.removeFile(Self.currentIdentifierFileName, in: self.path)
                }
            }
            return
        }
        try IdentifierEncoding.validate(identifier)
        let bytes = try TokenFileCoding.encode(
            TokenFileEnvelope(
                format: Self.currentIdentifierFileFormat,
                version: Self.fileFormatVersion,
                identifier: identifier,
                session: nil
            )
        )
        try await run {
            try self.mapErrors(file: "the current-identifier file") {
                try PrivateFiles.makeDirectory(self.path)
                try PrivateFiles.writeAtomically(bytes, to: Self.currentIdentifierFileName, in: self.path)
            }
        }
    }

    /// Lists the identifiers that have a file, sorted.
    ///
    /// Identifiers encoded in their file name are listed from the name alone, even when the file's content is
    /// corrupt (so that ``load(identifier:)`` reports the corruption instead of the session silently
    /// disappearing). Files with hashed names are read to learn their identifier; one that cannot be read is
    /// skipped. Temporary files and unrelated files are ignored. A missing directory lists nothing.
    ///
    /// - Throws: ``UserSessionError/Code/storeFailure`` when the directory cannot be read.
    public func storedIdentifiers() async throws -> [String] {
        try await run { try self.storedIdentifiersNow() }
    }

    // MARK: - Blocking implementations (run on `queue`)

    private func loadNow(identifier: String, name: IdentifierEncoding.Name) throws -> StoredSession? {
        try loadRevisedNow(identifier: identifier, name: name)?.session
    }

    /// Writes `session` under the identifier's write lock with the next revision and returns it. With
    /// `expectedRevision` (`.some(nil)`: nothing may be stored), the write happens only when the record's revision
    /// is that one; otherwise it throws ``UserSessionError/Code/revisionConflict``.
    func saveNow(
        _ session: StoredSession, identifier: String, name: IdentifierEncoding.Name, expectedRevision: UInt64??
    ) throws -> UInt64 {
        let file = Self.label(for: identifier)
        if name.isHashed, let owner = try? hashedFileOwner(name) {
            guard ExactIdentifier.areEqual(owner, identifier) else {
                throw UserSessionError(.storeFailure, "\(file) shares its hashed file name with another identifier")
            }
        }
        return try withWriteLock(file: file) {
            let current = try self.currentRevision(identifier: identifier, name: name, file: file)
            if let expected = expectedRevision, expected != current {
                throw UserSessionError(
                    .revisionConflict,
                    "\(file) has revision \(current.map(String.init) ?? "none"), not \(expected.map(String.init) ?? "none")"
                )
            }
            let revision = Self.nextRevision(after: current ?? 0)
            let envelope = TokenFileEnvelope(
                format: Self.tokenFileFormat, version: Self.fileFormatVersion, identifier: identifier,
                revision: revision, session: session)
            let bytes = try TokenFileCoding.encode(envelope)
            // Never write a file that load would refuse to read.
            guard bytes.count <= Self.maximumFileSize else {
                throw UserSessionError(
                    .storeFailure,
                    "\(file) would be \(bytes.count) bytes; files over \(Self.maximumFileSize) bytes are not read, so "
                        + "none is written")
            }
            try self.mapErrors(file: file) {
                try PrivateFiles.writeAtomically(bytes, to: name.value + ".json", in: self.path)
            }
            return revision
        }
    }

    /// The revision of the identifier's record, `nil` when there is none. A record that cannot be read (corrupt,
    /// foreign) counts as revision 0, so that a write may replace it.
    private func currentRevision(identifier: String, name: IdentifierEncoding.Name, file: String) throws -> UInt64? {
        do {
            return try loadRevisedNow(identifier: identifier, name: name)?.revision
        } catch {
            // Corrupt, newer, foreign or unreadable (a symbolic link): a write replaces it, as a plain save always did.
            return 0
        }
    }

    private func removeNow(identifier: String, name: IdentifierEncoding.Name) throws {
        // Never delete the file of another identifier that happens to share a hashed name.
        if name.isHashed, let owner = try? hashedFileOwner(name), !ExactIdentifier.areEqual(owner, identifier) {
            return
        }
        let file = Self.label(for: identifier)
        // Removing nothing creates nothing (not even the directory the lock needs).
        guard PrivateFiles.exists(path + "/" + name.value + ".json") else { return }
        _ = try withWriteLock(file: file) {
            try self.mapErrors(file: file) {
                try PrivateFiles.removeFile(name.value + ".json", in: self.path)
            }
        }
    }

    /// The record of `identifier` with its revision (version-1 files, which have none, are revision 1).
    func loadRevisedNow(identifier: String, name: IdentifierEncoding.Name) throws -> RevisedSession? {
        let file = Self.label(for: identifier)
        guard let bytes = try readFile(name.value + ".json", file: file) else { return nil }
        let envelope = try TokenFileCoding.decode(bytes, format: Self.tokenFileFormat, file: file)
        guard ExactIdentifier.areEqual(envelope.identifier, identifier) else {
            if name.isHashed {
                throw UserSessionError(.storeFailure, "\(file) shares its hashed file name with another identifier")
            }
            throw UserSessionError(.storeCorrupt, "\(file) records a different identifier")
        }
        guard let session = envelope.session else {
            throw UserSessionError(.storeCorrupt, "\(file) has no session")
        }
        return RevisedSession(session: session, revision: max(1, envelope.revision ?? 1))
    }

    private func loadCurrentIdentifierNow() throws -> String? {
        let file = "the current-identifier file"
        guard let bytes = try readFile(Self.currentIdentifierFileName, file: file) else { return nil }
        let envelope = try TokenFileCoding.decode(bytes, format: Self.currentIdentifierFileFormat, file: file)
        guard (try? IdentifierEncoding.validate(envelope.identifier)) != nil else {
            throw UserSessionError(.storeCorrupt, "\(file) holds an invalid identifier")
        }
        return envelope.identifier
    }

    private func storedIdentifiersNow() throws -> [String] {
        let names = try mapErrors(file: "the token directory") { try PrivateFiles.listDirectory(path) } ?? []
        var identifiers: [String] = []
        for fileName in names where fileName.hasSuffix(".json") && !fileName.hasPrefix(PrivateFiles.temporaryPrefix) {
            let stem = String(fileName.dropLast(".json".count))
            if let identifier = IdentifierEncoding.identifier(fromName: stem) {
                identifiers.append(identifier)
            } else if stem.hasPrefix("h-"),
                let owner = try? hashedFileOwner(IdentifierEncoding.Name(value: stem, isHashed: true)),
                (try? IdentifierEncoding.name(for: owner))?.value == stem
            {
                identifiers.append(owner)
            }
        }
        return identifiers.sorted()
    }

    /// The identifier recorded in a hashed file, or `nil` when there is no such file.
    private func hashedFileOwner(_ name: IdentifierEncoding.Name) throws -> String? {
        let file = "the token file \(name.value)"
        guard let bytes = try readFile(name.value + ".json", file: file) else { return nil }
        return try TokenFileCoding.decode(bytes, format: Self.tokenFileFormat, file: file).identifier
    }

    private func readFile(_ fileName: String, file: String) throws -> [UInt8]? {
        try mapErrors(file: file) {
            try PrivateFiles.readFile(path + "/" + fileName, limit: Self.maximumFileSize)
        }
    }

    /// Runs blocking file work on the store's queue, off the cooperative thread pool.
    @discardableResult
    func run<Value: Sendable>(_ work: @escaping @Sendable () throws -> Value) async throws -> Value {
        try await Parked.wait { (caller: Parked<Value, any Error>) -> Result<Value, any Error>? in
            queue.async {
                self.sweepOnce()
                caller.resume(with: Result { try work() })
            }
            return nil
        }
    }

    /// On the first call only: removes temporary files that dead writers left (see the type's documentation).
    private func sweepOnce() {
        guard hasSwept.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
        PrivateFiles.removeStaleTemporaryFiles(in: path, olderThan: Self.staleTemporaryFileAge)
    }

    /// Turns system errors into ``UserSessionError``.
    @discardableResult
    func mapErrors<Value>(file: String, _ body: () throws -> Value) throws -> Value {
        do {
            return try body()
        } catch let error as UserSessionError {
            throw error
        } catch let error as FileTooLargeError {
            throw UserSessionError(.storeCorrupt, "\(file) is larger than \(error.limit) bytes", underlying: error)
        } catch let error as SystemCallError {
            throw UserSessionError(.storeFailure, "cannot access \(file): \(error)", underlying: error)
        } catch {
            throw UserSessionError(.storeFailure, "cannot access \(file)", underlying: error)
        }
    }

    /// How files are named in messages: the identifier, shortened (identifiers are not secrets, but may be huge).
    static func label(for identifier: String) -> String {
        let shown = identifier.count > 64 ? identifier.prefix(64) + "…" : Substring(identifier)
        return "the token file for \"\(shown)\""
    }
}
