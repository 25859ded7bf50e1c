#if Sealing
import UserSessions

/// The keys a ``SealedTokenStore`` seals and opens records with: one current key, and the earlier ones that
/// records may still be sealed with.
///
/// Every write seals with ``current``; a record opens with whichever key of the ring its sealed form names. To
/// rotate, put the new key first and keep the old one in ``previous`` until
/// ``SealedTokenStore/resealAll()`` has moved every record to the new key; then drop the old one. See the article
/// "Sealing tokens at rest".
public struct SealingKeyRing: Sendable, CustomStringConvertible, CustomReflectable {
    /// The key every write seals with.
    public let current: SealingKey
    /// Older keys, used only to open records sealed before a rotation.
    public let previous: [SealingKey]

    /// Creates a key ring.
    ///
    /// - Throws: `UserSessionError.Code.invalidConfiguration` when two keys have the same identifier.
    public init(current: SealingKey, previous: [SealingKey] = []) throws {
        var seen: Set<String> = [current.id]
        for key in previous where !seen.insert(key.id).inserted {
            throw UserSessionError(.invalidConfiguration, "the key ring has two keys named \"\(key.id)\"")
        }
        self.current = current
        self.previous = previous
    }

    /// The identifiers of every key in the ring, the current one first.
    public var keyIDs: [String] { [current.id] + previous.map(\.id) }

    /// The key named `id`, if the ring has it.
    func key(id: String) -> SealingKey? {
        if current.id == id { return current }
        return previous.first { $0.id == id }
    }

    public var description: String { "SealingKeyRing(current: \(current.id), previous: \(previous.map(\.id)))" }
    public var customMirror: Mirror {
        Mirror(self, children: ["current": current.id, "previous": previous.map(\.id)], displayStyle: .struct)
    }
}
#endif
