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
/// pending sign-ins is checked by counting files, so processes inserting at the same instant may pass it by a
/// few. For a fleet of machines, use the PostgreSQL store.
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

    /// Records `pending` unless `limit` unexpired ones are pending.
    public func insert(_ pending: PendingSignIn, limit: Int, now: Date) async throws {
        let folder = pendingDirectory
        try await BlockingIO.run {
            try Self.makeDirectory(folder)
            var count = 0
            for file in try Self.files(in: folder) {
                guard let data = try? Data(contentsOf: file) else { continue }
                if let other = try? StateStoreCoding.decoder.decode(PendingSignIn.self, from: data),
                    !other.isExpired(at: now)
                {
                    count += 1
                } else {
                    try? FileManager.default.removeItem(at: file)
                }
            }
            guard count < limit else { throw OpenIDConnectError.tooManyPending(limit) }
            try Self.write(
                try StateStoreCoding.encoder.encode(pending), to: folder.appending(path: Self.name(pending.state)))
        }
    }

    /// Removes and returns the unexpired pending sign-in named `state`; one process wins a race.
    public func take(state: String, now: Date) async throws -> PendingSignIn? {
        let file = pendingDirectory.appending(path: Self.name(state))
        return try await BlockingIO.run {
            let claimed = file.deletingLastPathComponent()
                .appending(path: ".taken-" + UUID().uuidString)
            guard rename(file.path(percentEncoded: false), claimed.path(percentEncoded: false)) == 0 else {
                if errno == ENOENT { return nil }
                throw OpenIDConnectError(.storeFailure, "cannot claim a pending sign-in (errno \(errno))")
            }
            defer { try? FileManager.default.removeItem(at: claimed) }
            let pending = try StateStoreCoding.decoder.decode(PendingSignIn.self, from: try Data(contentsOf: claimed))
            return pending.isExpired(at: now) || pending.state != state ? nil : pending
        }
    }

    /// Records a completed sign-in.
    public func record(_ signIn: OpenIDSignInRecord) async throws {
        let file = recordsDirectory.appending(path: Self.name(signIn.issuer + "\u{0}" + signIn.identifier))
        try await BlockingIO.run {
            try Self.makeDirectory(file.deletingLastPathComponent())
            try Self.write(try StateStoreCoding.encoder.encode(signIn), to: file)
        }
    }

    /// The records a logout concerns (a scan of the records folder).
    public func records(issuer: String, subject: String?, sessionID: String?) async throws -> [OpenIDSignInRecord] {
        let folder = recordsDirectory
        return try await BlockingIO.run {
            guard FileManager.default.fileExists(atPath: folder.path(percentEncoded: false)) else { return [] }
            return try Self.files(in: folder).compactMap { file in
                guard let data = try? Data(contentsOf: file),
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
            guard FileManager.default.fileExists(atPath: file.path(percentEncoded: false)) else { return }
            try FileManager.default.removeItem(at: file)
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
                if let expiry = Self.expiry(of: other), expiry <= now { try? FileManager.default.removeItem(at: other) }
            }
            for _ in 0..<2 {
                let descriptor = open(file.path(percentEncoded: false), O_CREAT | O_EXCL | O_WRONLY, 0o600)
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
                try? FileManager.default.removeItem(at: file)
            }
            return false
        }
    }

    /// The file name of `key`: its SHA-256 in hex.
    private static func name(_ key: String) -> String {
        StateStoreCoding.hash(key).map { String(format: "%02x", $0) }.joined()
    }

    private static func files(in folder: URL) throws -> [URL] {
        try FileManager.default.contentsOfDirectory(at: folder, includingPropertiesForKeys: nil)
            .filter { !$0.lastPathComponent.hasPrefix(".") }
    }

    private static func expiry(of file: URL) -> Date? {
        guard let data = try? Data(contentsOf: file), let seconds = Double(String(decoding: data, as: UTF8.self))
        else { return nil }
        return Date(timeIntervalSince1970: seconds)
    }

    private static func makeDirectory(_ folder: URL) throws {
        try FileManager.default.createDirectory(
            at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    /// Writes `data` to a temporary file of mode 0600 and renames it over `file`.
    private static func write(_ data: Data, to file: URL) throws {
        let temporary = file.deletingLastPathComponent().appending(path: ".write-" + UUID().uuidString)
        guard
            FileManager.default.createFile(
                atPath: temporary.path(percentEncoded: false), contents: data, attributes: [.posixPermissions: 0o600])
        else {
            throw OpenIDConnectError(.storeFailure, "cannot write in \(file.deletingLastPathComponent().path)")
        }
        guard rename(temporary.path(percentEncoded: false), file.path(percentEncoded: false)) == 0 else {
            try? FileManager.default.removeItem(at: temporary)
            throw OpenIDConnectError(.storeFailure, "cannot write in \(file.deletingLastPathComponent().path)")
        }
    }
}
#endif
