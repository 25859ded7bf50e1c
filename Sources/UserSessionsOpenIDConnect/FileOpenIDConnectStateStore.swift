#if OpenIDConnect
import Foundation
import UserSessions

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An ``OpenIDConnectStateStore`` in a directory that the server processes of one machine share.
///
/// Each pending sign-in, sign-in record and remembered logout token is one file (mode 0600, in folders of mode
/// 0700) named by the SHA-256 of its key, so no `state` or `jti` appears in a file name. Single use holds across
/// processes: taking a pending sign-in renames its file first, and exactly one rename succeeds. The bound on
/// pending sign-ins is kept by counting files and dropping the ones that expire first, so processes inserting at the
/// same instant may pass it by a few. For a fleet of machines, use the PostgreSQL store.
public final class FileOpenIDConnectStateStore: OpenIDConnectStateStore {
    /// The shared directory.
    public let directory: URL

    /// A store in `directory` (created when first written).
    public init(directory: URL) {
        self.directory = directory
    }

    private var pendingDirectory: URL { directory.appending(path: "pending") }
    private var recordsDirectory: URL { directory.appending(path: "sign-ins") }
    private var tokensDirectory: URL { directory.appending(path: "logout-tokens") }

    /// Records `pending`; when `limit` unexpired ones are pending, the ones that expire first are dropped.
    public func insert(_ pending: PendingSignIn, limit: Int, now: Date) async throws {
        let folder = pendingDirectory
        try await BlockingIO.run {
            try Self.makeDirectory(folder)
            var unexpired: [(pending: PendingSignIn, file: URL)] = []
            for file in try Self.files(in: folder) {
                if let data = try? Self.read(file),
                    let other = try? StateStoreCoding.decoder.decode(PendingSignIn.self, from: data),
                    !other.isExpired(at: now)
                {
                    unexpired.append((other, file))
                } else {
                    Self.remove(file)
                }
            }
            let excess = unexpired.count - max(1, limit) + 1
            if excess > 0 {
                unexpired.sort { PendingSignIn.expiresFirst($0.pending, $1.pending) }
                for oldest in unexpired.prefix(excess) { Self.remove(oldest.file) }
            }
            try Self.write(try StateStoreCoding.encoder.encode(pending), named: Self.name(pending.state), in: folder)
        }
    }

    /// Removes and returns the unexpired pending sign-in named `state`; one process wins a race.
    ///
    /// A file that is not a pending sign-in this store wrote (a symbolic link planted in its place, a file larger
    /// than 64 KiB, or one that does not decode) is removed and reported as
    /// ``OpenIDConnectError/Code/storeFailure``.
    public func take(state: String, now: Date) async throws -> PendingSignIn? {
        let file = pendingDirectory.appending(path: Self.name(state))
        return try await BlockingIO.run {
            let claimed = file.deletingLastPathComponent()
                .appending(path: ".taken-" + UUID().uuidString)
            // rename moves a symbolic link itself, never its target; the read below refuses it.
            guard rename(file.path(percentEncoded: false), claimed.path(percentEncoded: false)) == 0 else {
                if errno == ENOENT { return nil }
                throw OpenIDConnectError(.storeFailure, "cannot claim a pending sign-in (errno \(errno))")
            }
            defer { Self.remove(claimed) }
            guard let data = try Self.read(claimed),
                let pending = try? StateStoreCoding.decoder.decode(PendingSignIn.self, from: data)
            else { throw OpenIDConnectError(.storeFailure, "a pending sign-in file is unreadable") }
            return pending.isExpired(at: now) || pending.state != state ? nil : pending
        }
    }

    /// Records a completed sign-in.
    public func record(_ signIn: OpenIDSignInRecord) async throws {
        let file = recordsDirectory.appending(path: Self.name(signIn.issuer + "\u{0}" + signIn.identifier))
        try await BlockingIO.run {
            let folder = file.deletingLastPathComponent()
            try Self.makeDirectory(folder)
            try Self.write(try StateStoreCoding.encoder.encode(signIn), named: file.lastPathComponent, in: folder)
        }
    }

    /// The records a logout concerns (a scan of the records folder).
    public func records(issuer: String, subject: String?, sessionID: String?) async throws -> [OpenIDSignInRecord] {
        let folder = recordsDirectory
        return try await BlockingIO.run {
            guard FileManager.default.fileExists(atPath: folder.path(percentEncoded: false)) else { return [] }
            return try Self.files(in: folder).compactMap { file in
                guard let data = try? Self.read(file),
                    let record = try? StateStoreCoding.decoder.decode(OpenIDSignInRecord.self, from: data),
                    record.matches(issuer: issuer, subject: subject, sessionID: sessionID)
                else { return nil }
                return record
            }
        }
    }

    /// Forgets `identifier`'s record at `issuer`.
    public func forget(identifier: String, issuer: String) async throws {
        let file = recordsDirectory.appending(path: Self.name(issuer + "\u{0}" + identifier))
        try await BlockingIO.run {
            do {
                try PrivateFiles.removeFile(
                    file.lastPathComponent, in: file.deletingLastPathComponent().path(percentEncoded: false))
            } catch {
                throw OpenIDConnectError(.storeFailure, "cannot remove a sign-in record (\(error))")
            }
        }
    }

    /// Remembers a logout token id with an exclusive create; `false` when another process or call already did.
    public func remember(logoutTokenID tokenID: String, issuer: String, until expiresAt: Date, now: Date) async throws
        -> Bool
    {
        let folder = tokensDirectory
        let file = folder.appending(path: Self.name(issuer + "\u{0}" + tokenID))
        return try await BlockingIO.run {
            try Self.makeDirectory(folder)
            for other in try Self.files(in: folder) where other != file {
                if let expiry = Self.expiry(of: other), expiry <= now { Self.remove(other) }
            }
            for _ in 0..<2 {
                let descriptor = open(
                    file.path(percentEncoded: false), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0o600)
                if descriptor >= 0 {
                    let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
                    try handle.write(contentsOf: Data(String(expiresAt.timeIntervalSince1970).utf8))
                    try handle.close()
                    return true
                }
                guard errno == EEXIST else {
                    throw OpenIDConnectError(.storeFailure, "cannot create a logout token record (errno \(errno))")
                }
                // Seen before: a replay, unless that record has expired (then it is replaced once).
                guard let expiry = Self.expiry(of: file), expiry <= now else { return false }
                Self.remove(file)
            }
            return false
        }
    }

    /// The file name of `key`: its SHA-256 in hex.
    private static func name(_ key: String) -> String {
        HexEscaping.lowercaseDigits(of: StateStoreCoding.hash(key))
    }

    /// The largest file the store reads: a pending sign-in, a sign-in record or a logout token's expiry is far
    /// smaller; a larger file was not written by the store.
    static let maximumFileSize = 64 * 1024

    private static func files(in folder: URL) throws -> [URL] {
        do {
            return (try PrivateFiles.listDirectory(folder.path(percentEncoded: false)) ?? [])
                .filter { !$0.hasPrefix(".") }.map { folder.appending(path: $0) }
        } catch {
            throw OpenIDConnectError(.storeFailure, "cannot list the state store (\(error))")
        }
    }

    private static func expiry(of file: URL) -> Date? {
        guard let data = try? read(file), let seconds = Double(String(decoding: data, as: UTF8.self))
        else { return nil }
        return Date(timeIntervalSince1970: seconds)
    }

    /// The bytes of `file` (never through a symbolic link, at most ``maximumFileSize``), or `nil` when it is gone.
    private static func read(_ file: URL) throws(OpenIDConnectError) -> Data? {
        do {
            return try PrivateFiles.readFile(file.path(percentEncoded: false), limit: maximumFileSize).map { Data($0) }
        } catch let error as FileTooLargeError {
            throw OpenIDConnectError(.storeFailure, "a state store file is larger than \(error.limit) bytes")
        } catch let error as SystemCallError where error.isSymbolicLink {
            throw OpenIDConnectError(.storeFailure, "a symbolic link stands in place of a state store file")
        } catch {
            throw OpenIDConnectError(.storeFailure, "cannot read a state store file (\(error))")
        }
    }

    /// Removes `file` (a symbolic link itself, never its target), if it is there.
    private static func remove(_ file: URL) {
        _ = try? PrivateFiles.removeFile(
            file.lastPathComponent, in: file.deletingLastPathComponent().path(percentEncoded: false))
    }

    /// Creates `folder` and its parents with mode 0700.
    private static func makeDirectory(_ folder: URL) throws(OpenIDConnectError) {
        do {
            try PrivateFiles.makeDirectory(folder.path(percentEncoded: false))
        } catch {
            throw OpenIDConnectError(.storeFailure, "cannot create a folder of the state store (\(error))")
        }
    }

    /// Replaces `folder/name` with `data` atomically (mode 0600, synced to the disk).
    private static func write(_ data: Data, named name: String, in folder: URL) throws(OpenIDConnectError) {
        do {
            try PrivateFiles.writeAtomically([UInt8](data), to: name, in: folder.path(percentEncoded: false))
        } catch {
            throw OpenIDConnectError(.storeFailure, "cannot write in the state store (\(error))")
        }
    }
}
#endif
