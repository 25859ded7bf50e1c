import Foundation

extension RemoteTokenStore {
    /// Accepts `https` endpoints, and `http` endpoints only on a loopback host.
    static func checkEndpoint(_ endpoint: URL) throws {
        try SecureEndpoint.check(endpoint, describedAs: "the token cache endpoint")
    }

    /// A reserved key must be a safe name that cannot equal an encoded identifier.
    static func checkCurrentIdentifierKey(_ key: String) throws {
        if let problem = IdentifierRules.problem(withReservedName: key, maximumLength: 200) {
            throw UserSessionError(.invalidIdentifier, "the current-identifier key \(problem)")
        }
    }
}
