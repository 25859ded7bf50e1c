/// Everything needed to open a session: who the user is and, optionally, their credentials.
public struct UserSessionPrototype: Sendable, Hashable {
    /// The session identifier; it keys the stored credentials. Must be non-empty.
    public var identifier: String
    /// The user.
    public var userInfo: UserInfo
    /// The credentials, if the user signed in with OAuth.
    public var credentials: Credentials?

    /// Creates a prototype. `identifier` defaults to the user's id.
    public init(identifier: String? = nil, userInfo: UserInfo, credentials: Credentials? = nil) {
        self.identifier = identifier ?? userInfo.id
        self.userInfo = userInfo
        self.credentials = credentials
    }
}
