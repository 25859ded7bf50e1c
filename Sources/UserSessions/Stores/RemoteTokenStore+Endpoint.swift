import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension RemoteTokenStore {
    /// Accepts `https` endpoints, and `http` endpoints only on a loopback host.
    static func checkEndpoint(_ endpoint: URL) throws {
        guard let host = endpoint.host(percentEncoded: false), !host.isEmpty else {
            throw UserSessionError(.insecureEndpoint, "the token cache endpoint has no host")
        }
        switch endpoint.scheme?.lowercased() {
        case "https":
            return
        case "http":
            guard isLoopback(host: host) else {
                throw UserSessionError(
                    .insecureEndpoint,
                    "the token cache endpoint uses plain HTTP on \(host), which is not a loopback host; use HTTPS"
                )
            }
        default:
            throw UserSessionError(.insecureEndpoint, "the token cache endpoint must be an https URL")
        }
    }

    /// Whether `host` is `localhost`, an IPv4 address in `127.0.0.0/8`, `::1`, or `::ffff:127.x.y.z`.
    ///
    /// Addresses are parsed strictly with `inet_pton`, so names such as `127.0.0.1.example.com` are not loopback.
    static func isLoopback(host: String) -> Bool {
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

    /// A reserved key must be a safe name that cannot equal an encoded identifier.
    static func checkCurrentIdentifierKey(_ key: String) throws {
        let isSafe = key.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
        }
        guard !key.isEmpty, key.utf8.count <= 200, isSafe, !key.hasPrefix("u-"), !key.hasPrefix("h-") else {
            throw UserSessionError(
                .invalidIdentifier,
                "the current-identifier key must be 1–200 characters of [a-z0-9_-] and not start with u- or h-"
            )
        }
    }
}
