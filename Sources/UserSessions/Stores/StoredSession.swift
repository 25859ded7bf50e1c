/// What a ``TokenStore`` keeps for one session identifier: the credentials and the user they belong to.
public struct StoredSession: Sendable, Hashable, Codable {
    /// The user.
    public var userInfo: UserInfo
    /// The credentials, if the session has any.
    public var credentials: Credentials?

    /// Creates a stored session.
    public init(userInfo: UserInfo, credentials: Credentials?) {
        self.userInfo = userInfo
        self.credentials = credentials
    }

    enum CodingKeys: String, CodingKey {
        case userInfo = "user_info"
        case credentials
    }
}
