import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Advisory `flock` locks on private lock files, for ``FileTokenStore``'s refresh lease and write lock.
///
/// `flock` locks belong to an open file description: two descriptors conflict even within one process, and the
/// kernel releases a lock when its descriptor is closed, which includes the death of the process. Lock files are
/// created with mode `0600` and never deleted (deleting a lock file while another process waits on it would let
/// two holders in). Blocking calls: run them off the cooperative thread pool.
enum FileLocks {
    /// Opens (creating when needed) the lock file at `path`.
    static func open(_ path: String) throws -> Int32 {
        let descriptor = openLockFile(path)
        guard descriptor >= 0 else { throw SystemCallError(call: "open", path: path, errno: errno) }
        // The umask may have removed bits; make the mode exactly 0600.
        if fchmod(descriptor, 0o600) != 0 {
            let error = errno
            _ = closeDescriptor(descriptor)
            throw SystemCallError(call: "fchmod", path: path, errno: error)
        }
        return descriptor
    }

    /// Takes the exclusive lock of `descriptor` if it is free; `false` when another descriptor holds it.
    static func tryLock(_ descriptor: Int32, path: String) throws -> Bool {
        while true {
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return true }
            let error = errno
            if error == EINTR { continue }
            if error == EWOULDBLOCK || error == EAGAIN { return false }
            throw SystemCallError(call: "flock", path: path, errno: error)
        }
    }

    /// Waits for the exclusive lock of `descriptor` (for short critical sections only).
    static func lock(_ descriptor: Int32, path: String) throws {
        while flock(descriptor, LOCK_EX) != 0 {
            let error = errno
            guard error == EINTR else { throw SystemCallError(call: "flock", path: path, errno: error) }
        }
    }

    /// Releases the lock (closing the descriptor releases it).
    static func close(_ descriptor: Int32) {
        _ = closeDescriptor(descriptor)
    }

    /// The revision high-water mark kept in a write-lock file (0 when empty or unreadable).
    static func readMark(_ descriptor: Int32) -> UInt64 {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return 0 }
        return UInt64(String(decoding: buffer[0..<count], as: UTF8.self).trimmingCharacters(in: .whitespaces)) ?? 0
    }

    /// Replaces the high-water mark in a write-lock file and makes it durable.
    static func writeMark(_ mark: UInt64, to descriptor: Int32, path: String) throws {
        let bytes = Array(String(mark).utf8)
        guard ftruncate(descriptor, 0) == 0 else { throw SystemCallError(call: "ftruncate", path: path, errno: errno) }
        let written = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
        guard written == bytes.count else { throw SystemCallError(call: "pwrite", path: path, errno: errno) }
        guard fsync(descriptor) == 0 else { throw SystemCallError(call: "fsync", path: path, errno: errno) }
    }
}

private func openLockFile(_ path: String) -> Int32 {
    open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
}

private func closeDescriptor(_ descriptor: Int32) -> Int32 {
    close(descriptor)
}
