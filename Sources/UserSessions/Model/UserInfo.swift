/// What the package knows about the signed-in user. Persisted with the credentials so that a restored session
/// has it back.
public struct UserInfo: Sendable, Hashable, Codable {
    /// The user's identifier at the identity provider.
    public var id: String {
        get { box.fields.id }
        set { change { $0.id = newValue } }
    }
    /// The user's e-mail address, if known.
    public var email: String? {
        get { box.fields.email }
        set { change { $0.email = newValue } }
    }
    /// The user's display name, if known.
    public var name: String? {
        get { box.fields.name }
        set { change { $0.name = newValue } }
    }
    /// Other string attributes the application wants to keep with the session.
    public var attributes: [String: String] {
        get { box.fields.attributes }
        set { change { $0.attributes = newValue } }
    }

    /// The fields, as one value; encoded under their names.
    struct Fields: Hashable, Sendable, Codable {
        var id: String
        var email: String?
        var name: String?
        var attributes: [String: String]
    }

    /// The fields in one immutable object that every copy shares (as ``Credentials`` does): a session's user info
    /// is held by its view, by the ledger's entry and by the event hub's session, each copy one word.
    final class Box: Sendable {
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var box: Box

    /// Replaces the fields with `body`'s change of them (copies never see it).
    private mutating func change(_ body: (inout Fields) -> Void) {
        var fields = box.fields
        body(&fields)
        box = Box(fields)
    }

    /// Creates user info.
    public init(id: String, email: String? = nil, name: String? = nil, attributes: [String: String] = [:]) {
        box = Box(Fields(id: id, email: email, name: name, attributes: attributes))
    }

    /// Equal when every field is: copies of one value compare without looking at a field.
    public static func == (lhs: UserInfo, rhs: UserInfo) -> Bool {
        lhs.box === rhs.box || lhs.box.fields == rhs.box.fields
    }

    public func hash(into hasher: inout Hasher) {
        box.fields.hash(into: &hasher)
    }

    public init(from decoder: any Decoder) throws {
        box = Box(try Fields(from: decoder))
    }

    public func encode(to encoder: any Encoder) throws {
        try box.fields.encode(to: encoder)
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
