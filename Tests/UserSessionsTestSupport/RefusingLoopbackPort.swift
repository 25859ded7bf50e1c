import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A TCP socket bound to an ephemeral port on 127.0.0.1: the one place the test support binds a loopback port.
package enum LoopbackSocket {
    /// A new socket bound to `127.0.0.1:0`, listening (with a backlog of 16) when `listening`, and its port.
    ///
    /// - Throws: ``LoopbackSocketError`` naming the call that failed, with its `errno`.
    package static func bound(listening: Bool) throws(LoopbackSocketError) -> (descriptor: Int32, port: Int) {
        #if canImport(Darwin)
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #else
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #endif
        guard descriptor >= 0 else { throw LoopbackSocketError(step: "socket", code: errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(descriptor, address, length) == 0 && (!listening || listen(descriptor, 16) == 0)
                    && getsockname(descriptor, address, &length) == 0
            }
        }
        guard bound else {
            let code = errno
            close(descriptor)
            throw LoopbackSocketError(step: listening ? "bind/listen" : "bind", code: code)
        }
        return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
    }
}

/// A socket call failed while binding a ``LoopbackSocket``.
package struct LoopbackSocketError: Error, CustomStringConvertible {
    /// The call that failed.
    package let step: String
    /// Its `errno`.
    package let code: Int32

    package var description: String { "\(step) failed with errno \(code)" }
}

/// A port on 127.0.0.1 that refuses every connection, for as long as this value is held.
///
/// It is a TCP socket bound to an ephemeral port that never listens: a connection to it is refused at once, and
/// no other process or test can take the port meanwhile. A server started and stopped to free its port could not
/// promise that: another test running in parallel may bind the freed port and answer (seen in CI: an HTTP 404 where
/// a refused connection was expected).
package final class RefusingLoopbackPort: Sendable {
    private let descriptor: Int32
    /// The port number.
    package let port: Int

    /// Binds a new socket to `127.0.0.1:0` without listening.
    package init() throws {
        (descriptor, port) = try LoopbackSocket.bound(listening: false)
    }

    deinit { close(descriptor) }

    /// `http://127.0.0.1:<port>` followed by `path` (which starts with `/`).
    package func url(_ path: String) -> URL {
        var components = URLComponents()
        components.scheme = "http"
        components.host = "127.0.0.1"
        components.port = port
        components.path = path
        guard let url = components.url else { preconditionFailure("not a URL path: \(path)") }
        return url
    }
}
