/// What the package knows about the signed-in user. Persisted with the credentials so that a restored session
/// has it back.
public struct UserInfo: Sendable, Hashable, Codable {
    /// The user's identifier at the identity provider.
    public var id: String
    /// The user's e-mail address, if known.
    public var email: String?
    /// The user's display name, if known.
    public var name: String?
    /// Other string attributes the application wants to keep with the session.
    public var attributes: [String: String]

    /// Creates user info.
    public init(id: String, email: String? = nil, name: String? = nil, attributes: [String: String] = [:]) {
        self.id = id
        self.email = email
        self.name = name
        self.attributes = attributes
    }
}
