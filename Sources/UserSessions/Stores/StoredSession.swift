/// What a ``TokenStore`` keeps for one session identifier: the credentials and the user they belong to.
public struct StoredSession: Sendable, Hashable, Codable {
    /// The user.
    public var userInfo: UserInfo
    /// The credentials, if the session has any.
    public var credentials: Credentials?
    /// Whether the authorization server refused the refresh token of ``credentials`` for good (`invalid_grant`).
    ///
    /// Set by the package when a refresh is refused, so that every controller and every instance sharing the
    /// store learns it once: restoring such a record throws ``UserSessionError/Code/refreshTokenRefused`` at once,
    /// without contacting the server, until the user signs in again (which writes a new record). Stores keep it
    /// with the record; records written before it existed read as `false`.
    public var refreshTokenRefused: Bool

    /// Creates a stored session.
    public init(userInfo: UserInfo, credentials: Credentials?, refreshTokenRefused: Bool = false) {
        self.userInfo = userInfo
        self.credentials = credentials
        self.refreshTokenRefused = refreshTokenRefused
    }

    enum CodingKeys: String, CodingKey {
        case userInfo = "user_info"
        case credentials
        case refreshTokenRefused = "refresh_token_refused"
    }

    /// Decodes a stored session; a record without `refresh_token_refused` reads as not refused.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        userInfo = try container.decode(UserInfo.self, forKey: .userInfo)
        credentials = try container.decodeIfPresent(Credentials.self, forKey: .credentials)
        refreshTokenRefused = try container.decodeIfPresent(Bool.self, forKey: .refreshTokenRefused) ?? false
    }

    /// Encodes the stored session; `refresh_token_refused` is written only when it is `true`, so records of
    /// sessions that were never refused keep their format.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(userInfo, forKey: .userInfo)
        try container.encodeIfPresent(credentials, forKey: .credentials)
        if refreshTokenRefused { try container.encode(true, forKey: .refreshTokenRefused) }
    }
}
