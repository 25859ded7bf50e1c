import Foundation

extension Credentials: Codable {
    /// The current version of the encoded form. Decoding rejects newer versions with
    /// ``UserSessionError/Code/unsupportedFormatVersion``.
    ///
    /// Version 2 adds the DPoP key (`dpop_key`). Credentials without one are still written as version 1, so a
    /// rollback to a release that knows only version 1 reads them; credentials with a key are version 2, so such a
    /// release refuses them instead of dropping the key and presenting unbound requests for bound tokens.
    public static let formatVersion = 2

    /// The version these credentials are written as.
    package var encodedVersion: Int { dpopKey == nil ? 1 : 2 }

    enum CodingKeys: String, CodingKey {
        case version
        case accessToken = "access_token"
        case refreshToken = "refresh_token"
        case tokenType = "token_type"
        case expiresAt = "expires_at"
        case lastRefreshedAt = "last_refreshed_at"
        case source
        case grantedPermissions = "granted_permissions"
        case declinedPermissions = "declined_permissions"
        case idToken = "id_token"
        case dpopKey = "dpop_key"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let version = try container.decodeIfPresent(Int.self, forKey: .version) ?? 1
        guard version >= 1, version <= Self.formatVersion else {
            throw UserSessionError(.unsupportedFormatVersion, "credentials format version \(version) is not supported")
        }
        self.init(
            accessToken: try container.decode(String.self, forKey: .accessToken),
            refreshToken: try container.decodeIfPresent(String.self, forKey: .refreshToken),
            tokenType: try container.decodeIfPresent(String.self, forKey: .tokenType),
            expiresAt: try container.decodeIfPresent(Date.self, forKey: .expiresAt),
            lastRefreshedAt: try container.decodeIfPresent(Date.self, forKey: .lastRefreshedAt),
            source: try container.decodeIfPresent(Source.self, forKey: .source) ?? .external,
            grantedPermissions: Set(try container.decodeIfPresent([String].self, forKey: .grantedPermissions) ?? []),
            declinedPermissions: Set(
                try container.decodeIfPresent([String].self, forKey: .declinedPermissions) ?? []),
            // Absent in files written before sign-in with OpenID Connect existed: no ID token.
            idToken: try container.decodeIfPresent(String.self, forKey: .idToken),
            dpopKey: try container.decodeIfPresent(DPoPKey.self, forKey: .dpopKey))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(encodedVersion, forKey: .version)
        try container.encode(accessToken, forKey: .accessToken)
        try container.encodeIfPresent(refreshToken, forKey: .refreshToken)
        try container.encodeIfPresent(tokenType, forKey: .tokenType)
        try container.encodeIfPresent(expiresAt, forKey: .expiresAt)
        try container.encodeIfPresent(lastRefreshedAt, forKey: .lastRefreshedAt)
        try container.encode(source, forKey: .source)
        try container.encode(grantedPermissions.sorted(), forKey: .grantedPermissions)
        try container.encode(declinedPermissions.sorted(), forKey: .declinedPermissions)
        try container.encodeIfPresent(idToken, forKey: .idToken)
        try container.encodeIfPresent(dpopKey, forKey: .dpopKey)
    }
}
