import Foundation

extension Credentials: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// A description without secrets: tokens show only as `<redacted>`.
    public var description: String {
        var parts = ["accessToken: <redacted>", "refreshToken: \(refreshToken == nil ? "none" : "<redacted>")"]
        if let tokenType { parts.append("tokenType: \(tokenType)") }
        parts.append("expiresAt: \(expiresAt.map { "\($0)" } ?? "never")")
        if let lastRefreshedAt { parts.append("lastRefreshedAt: \(lastRefreshedAt)") }
        parts.append("source: \(source)")
        parts.append("granted: \(grantedPermissions.sorted())")
        if !declinedPermissions.isEmpty { parts.append("declined: \(declinedPermissions.sorted())") }
        if idToken != nil { parts.append("idToken: <redacted>") }
        if let dpopKey { parts.append("dpopKey: \(dpopKey)") }
        return "Credentials(\(parts.joined(separator: ", ")))"
    }

    public var debugDescription: String { description }

    // dump() and String(reflecting:) walk the mirror; give them one without the token values.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "accessToken": "<redacted>",
                "refreshToken": refreshToken == nil ? "none" : "<redacted>",
                "tokenType": tokenType as Any,
                "expiresAt": expiresAt as Any,
                "lastRefreshedAt": lastRefreshedAt as Any,
                "source": source.rawValue,
                "grantedPermissions": grantedPermissions.sorted(),
                "declinedPermissions": declinedPermissions.sorted(),
                "idToken": idToken == nil ? "none" : "<redacted>",
                "dpopKey": dpopKey.map { "\($0)" } ?? "none",
            ],
            displayStyle: .struct
        )
    }
}
