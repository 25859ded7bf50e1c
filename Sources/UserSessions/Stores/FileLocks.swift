import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Advisory `flock` locks, for ``FileTokenStore``'s refresh lease (a lock file per identifier) and write lock (the
/// directory).
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

    /// Opens `directory` and waits for its exclusive lock (for short critical sections only); close the returned
    /// descriptor to release it.
    static func lockDirectory(_ directory: String) throws -> Int32 {
        let descriptor = openDirectory(directory)
        guard descriptor >= 0 else { throw SystemCallError(call: "open", path: directory, errno: errno) }
        do {
            try lock(descriptor, path: directory)
        } catch {
            _ = closeDescriptor(descriptor)
            throw error
        }
        return descriptor
    }
}

private func openDirectory(_ path: String) -> Int32 {
    open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
}

private func openLockFile(_ path: String) -> Int32 {
    open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
}

private func closeDescriptor(_ descriptor: Int32) -> Int32 {
    close(descriptor)
}
