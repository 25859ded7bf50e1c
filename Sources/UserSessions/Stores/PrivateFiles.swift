import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed system call, with the `errno` it set.
package struct SystemCallError: Error, CustomStringConvertible, Sendable {
    /// The call, such as `rename`.
    package var call: String
    /// The path it was given.
    package var path: String
    /// The `errno` value.
    package var errno: Int32

    package init(call: String, path: String, errno: Int32) {
        self.call = call
        self.path = path
        self.errno = errno
    }

    /// Whether the path named a symbolic link that the call refused to follow (`O_NOFOLLOW`): something planted in
    /// place of a file, never a file the store wrote.
    package var isSymbolicLink: Bool { errno == ELOOP }

    package var description: String { "\(call)(\(path)): \(String(cString: strerror(errno))) (errno \(errno))" }
}

/// A file that is larger than the reader accepts.
package struct FileTooLargeError: Error, Sendable {
    package var path: String
    package var limit: Int
}

/// Blocking POSIX file operations for private (owner-only) files. Call them off the cooperative thread pool.
///
/// The one writer and reader of every file store of the package: the token store, the OpenID Connect state store and
/// the web-session store.
package enum PrivateFiles {
    /// Creates `path` and any missing parents with mode `0700`. An existing directory is left as it is.
    ///
    /// The mode is set explicitly after `mkdir`, so the process umask cannot make it looser or unusable.
    package static func makeDirectory(_ path: String) throws {
        var components: [String] = []
        var current = path
        // Walk up to the first existing ancestor, then create downwards.
        while true {
            var status = stat()
            if stat(current, &status) == 0 {
                guard status.st_mode & S_IFMT == S_IFDIR else {
                    throw SystemCallError(call: "mkdir", path: current, errno: ENOTDIR)
                }
                break
            }
            let error = errno
            guard error == ENOENT else { throw SystemCallError(call: "stat", path: current, errno: error) }
            components.append(current)
            let parent = (current as NSString).deletingLastPathComponent
            guard !parent.isEmpty, parent != current else { break }
            current = parent
        }
        for directory in components.reversed() {
            if mkdir(directory, 0o700) != 0 {
                let error = errno
                // Another thread or process created it first: fine.
                guard error == EEXIST else { throw SystemCallError(call: "mkdir", path: directory, errno: error) }
                continue
            }
            guard chmod(directory, 0o700) == 0 else {
                throw SystemCallError(call: "chmod", path: directory, errno: errno)
            }
        }
    }

    /// Reads a whole file without following a symbolic link; `nil` when it does not exist.
    package static func readFile(_ path: String, limit: Int) throws -> [UInt8]? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard descriptor >= 0 else {
            let error = errno
            if error == ENOENT { return nil }
            throw SystemCallError(call: "open", path: path, errno: error)
        }
        defer { _ = close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { buffer in
                read(descriptor, buffer.baseAddress, buffer.count)
            }
            if count < 0 {
                let error = errno
                if error == EINTR { continue }
                throw SystemCallError(call: "read", path: path, errno: error)
            }
            if count == 0 { return bytes }
            bytes.append(contentsOf: chunk[0..<count])
            if bytes.count > limit { throw FileTooLargeError(path: path, limit: limit) }
        }
    }

    /// Replaces `directory/name` with `bytes` atomically: after a crash, readers see the old or the new content.
    ///
    /// Writes a uniquely named temporary file in the same directory (`O_CREAT | O_EXCL`, mode `0600`), writes
    /// everything, `fsync`s it, renames it over the target and `fsync`s the directory. Concurrent writers each use
    /// their own temporary file; the last rename wins. The temporary file is removed on failure.
    package static func writeAtomically(_ bytes: [UInt8], to name: String, in directory: String) throws {
        let target = directory + "/" + name
        var temporary = ""
        var descriptor: Int32 = -1
        for _ in 0..<16 {
            temporary = directory + "/" + temporaryPrefix + String(UInt64.random(in: .min ... .max), radix: 36)
            descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
            if descriptor >= 0 || errno != EEXIST { break }
        }
        guard descriptor >= 0 else { throw SystemCallError(call: "open", path: temporary, errno: errno) }
        var isOpen = true
        var isRenamed = false
        defer {
            if isOpen { _ = close(descriptor) }
            if !isRenamed { _ = unlink(temporary) }
        }
        // The umask may have removed bits; make the mode exactly 0600.
        guard fchmod(descriptor, 0o600) == 0 else {
            throw SystemCallError(call: "fchmod", path: temporary, errno: errno)
        }
        try writeAll(bytes, to: descriptor, path: temporary)
        try synchronize(descriptor, path: temporary)
        isOpen = false
        guard close(descriptor) == 0 else { throw SystemCallError(call: "close", path: temporary, errno: errno) }
        guard rename(temporary, target) == 0 else {
            throw SystemCallError(call: "rename", path: target, errno: errno)
        }
        isRenamed = true
        try synchronizeDirectory(directory)
    }

    /// Whether something exists at `path` (a symbolic link is not followed).
    package static func exists(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0
    }

    /// Removes `directory/name`; returns `false` when it did not exist.
    @discardableResult
    package static func removeFile(_ name: String, in directory: String) throws -> Bool {
        let path = directory + "/" + name
        guard unlink(path) == 0 else {
            let error = errno
            if error == ENOENT || error == ENOTDIR { return false }
            throw SystemCallError(call: "unlink", path: path, errno: error)
        }
        try synchronizeDirectory(directory)
        return true
    }

    /// The names in `directory`, or `nil` when it does not exist.
    package static func listDirectory(_ directory: String) throws -> [String]? {
        var status = stat()
        guard stat(directory, &status) == 0 else {
            let error = errno
            if error == ENOENT { return nil }
            throw SystemCallError(call: "stat", path: directory, errno: error)
        }
        return try FileManager.default.contentsOfDirectory(atPath: directory)
    }

    /// Names of temporary files start with this; a reader must skip them.
    package static let temporaryPrefix = ".tmp-"

    /// Removes the regular files in `directory` whose names start with ``temporaryPrefix`` and that were last
    /// modified more than `age` seconds before `now`: leftovers of writers that died between creating and renaming
    /// them. Best effort: a file that cannot be inspected or removed is skipped, and a missing directory holds none.
    ///
    /// - Returns: How many files were removed.
    @discardableResult
    package static func removeStaleTemporaryFiles(in directory: String, olderThan age: Int, now: Int = Int(time(nil)))
        -> Int
    {
        guard let names = try? listDirectory(directory) else { return 0 }
        var removed = 0
        for name in names where name.hasPrefix(temporaryPrefix) {
            let path = directory + "/" + name
            var status = stat()
            guard lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { continue }
            #if canImport(Darwin)
            let modified = Int(status.st_mtimespec.tv_sec)
            #else
            let modified = Int(status.st_mtim.tv_sec)
            #endif
            // A file modified in the future (the clock went back) is not known to be stale: keep it.
            guard now - modified > age else { continue }
            if unlink(path) == 0 { removed += 1 }
        }
        if removed > 0 { try? synchronizeDirectory(directory) }
        return removed
    }

    private static func writeAll(_ bytes: [UInt8], to descriptor: Int32, path: String) throws {
        try bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = write(descriptor, buffer.baseAddress.map { $0 + offset }, buffer.count - offset)
                if written < 0 {
                    let error = errno
                    if error == EINTR { continue }
                    throw SystemCallError(call: "write", path: path, errno: error)
                }
                offset += written
            }
        }
    }

    private static func synchronize(_ descriptor: Int32, path: String) throws {
        #if canImport(Darwin)
        // On Apple platforms fsync does not reach the medium; F_FULLFSYNC does (when the file system supports it).
        if fcntl(descriptor, F_FULLFSYNC) == 0 { return }
        #endif
        guard fsync(descriptor) == 0 else { throw SystemCallError(call: "fsync", path: path, errno: errno) }
    }

    /// Makes a rename or unlink in `directory` durable.
    private static func synchronizeDirectory(_ directory: String) throws {
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw SystemCallError(call: "open", path: directory, errno: errno) }
        defer { _ = close(descriptor) }
        guard fsync(descriptor) == 0 else {
            let error = errno
            // Some file systems cannot sync a directory; the rename itself has happened.
            if error == EINVAL || error == ENOTSUP { return }
            throw SystemCallError(call: "fsync", path: directory, errno: error)
        }
    }
}
