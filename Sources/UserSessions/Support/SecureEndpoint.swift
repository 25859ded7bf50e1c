import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The rule every endpoint that receives tokens follows: HTTPS, or plain HTTP only on a loopback host.
package enum SecureEndpoint {
    /// Accepts `https` URLs with a host, and `http` URLs whose host is loopback.
    ///
    /// - Throws: ``UserSessionError/Code/insecureEndpoint`` naming the endpoint as `name` (for example "the token
    ///   endpoint").
    package static func check(_ url: URL, describedAs name: String) throws {
        guard let host = url.host(percentEncoded: false), !host.isEmpty else {
            throw UserSessionError(.insecureEndpoint, "\(name) has no host")
        }
        switch url.scheme?.lowercased() {
        case "https":
            return
        case "http":
            guard isLoopback(host: host) else {
                throw UserSessionError(
                    .insecureEndpoint, "\(name) uses plain HTTP on \(host), which is not a loopback host; use HTTPS")
            }
        default:
            throw UserSessionError(.insecureEndpoint, "\(name) must be an https URL")
        }
    }

    /// Whether `host` is `localhost`, an IPv4 address in `127.0.0.0/8`, `::1`, or `::ffff:127.x.y.z`.
    ///
    /// Addresses are parsed strictly with `inet_pton`, so names such as `127.0.0.1.example.com` are not loopback.
    package static func isLoopback(host: String) -> Bool {
        var host = host.lowercased()
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host == "localhost" || host == "localhost." { return true }
        var ipv4 = in_addr()
        if inet_pton(AF_INET, host, &ipv4) == 1 {
            return UInt32(bigEndian: ipv4.s_addr) >> 24 == 127
        }
        var ipv6 = in6_addr()
        if inet_pton(AF_INET6, host, &ipv6) == 1 {
            let bytes = withUnsafeBytes(of: &ipv6) { Array($0) }
            let isIPv6Loopback = bytes[0..<15].allSatisfy { $0 == 0 } && bytes[15] == 1
            let isMappedIPv4Loopback =
                bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF && bytes[12] == 127
            return isIPv6Loopback || isMappedIPv4Loopback
        }
        return false
    }
}
