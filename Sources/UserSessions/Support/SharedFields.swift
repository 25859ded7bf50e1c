/// A value's fields in one immutable object that every copy of the value shares: a copy is one word and one
/// reference count, however many fields there are. Setting ``fields`` makes a new object, so a copy never sees
/// another's change. ``Credentials`` and ``UserInfo`` keep their fields this way: a session's are held at once by its
/// controller, by the process's credentials ledger and by its event hub, and copied along every restore.
struct SharedFields<Fields: Hashable & Sendable>: Hashable, Sendable {
    private final class Box: Sendable {
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var box: Box

    init(_ fields: Fields) { box = Box(fields) }

    var fields: Fields {
        get { box.fields }
        set { box = Box(newValue) }
    }

    /// Equal when every field is: copies of one value compare without looking at a field.
    static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.box === rhs.box || lhs.box.fields == rhs.box.fields
    }

    func hash(into hasher: inout Hasher) {
        box.fields.hash(into: &hasher)
    }
}
