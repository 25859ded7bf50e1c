import Foundation

extension RemoteTokenStore {
    /// Accepts `https` endpoints, and `http` endpoints only on a loopback host.
    static func checkEndpoint(_ endpoint: URL) throws {
        try SecureEndpoint.check(endpoint, describedAs: "the token cache endpoint")
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
