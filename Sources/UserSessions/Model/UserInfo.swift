/// What the package knows about the signed-in user. Persisted with the credentials so that a restored session
/// has it back.
public struct UserInfo: Sendable, Hashable, Codable {
    /// The user's identifier at the identity provider.
    public var id: String {
        get { shared.fields.id }
        set { shared.fields.id = newValue }
    }
    /// The user's e-mail address, if known.
    public var email: String? {
        get { shared.fields.email }
        set { shared.fields.email = newValue }
    }
    /// The user's display name, if known.
    public var name: String? {
        get { shared.fields.name }
        set { shared.fields.name = newValue }
    }
    /// Other string attributes the application wants to keep with the session.
    public var attributes: [String: String] {
        get { shared.fields.attributes }
        set { shared.fields.attributes = newValue }
    }

    /// The fields, as one value; encoded under their names.
    struct Fields: Hashable, Sendable, Codable {
        var id: String
        var email: String?
        var name: String?
        var attributes: [String: String]
    }

    /// The fields, shared by every copy (see ``SharedFields``).
    private var shared: SharedFields<Fields>

    /// Creates user info.
    public init(id: String, email: String? = nil, name: String? = nil, attributes: [String: String] = [:]) {
        shared = SharedFields(Fields(id: id, email: email, name: name, attributes: attributes))
    }

    public init(from decoder: any Decoder) throws {
        shared = SharedFields(try Fields(from: decoder))
    }

    public func encode(to encoder: any Encoder) throws {
        try shared.fields.encode(to: encoder)
    }
}

extension UserInfo: CustomReflectable {
    // dump() and String(reflecting:) show the fields, not the object that holds them.
    public var customMirror: Mirror {
        Mirror(
            self, children: ["id": id, "email": email as Any, "name": name as Any, "attributes": attributes],
            displayStyle: .struct)
    }
}
