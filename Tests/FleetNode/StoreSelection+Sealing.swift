#if Sealing
import UserSessions
import UserSessionsSealing

extension StoreSelection {
    /// The namespace a node's sealed records are bound to; the tests seed records with it.
    static let sealingNamespace = "fleet"

    /// `store` wrapped in a ``SealedTokenStore`` with the one key `ID:BASE64` (a coordinated store stays one).
    static func sealed(_ store: any TokenStore, key: String) throws -> any TokenStore {
        guard let colon = key.firstIndex(of: ":") else {
            throw Unknown(description: "--sealing-key wants ID:BASE64")
        }
        let ring = try SealingKeyRing(
            current: SealingKey(id: String(key[..<colon]), base64: String(key[key.index(after: colon)...])))
        return wrap(store, ring)
    }

    private static func wrap<Base: TokenStore>(_ base: Base, _ ring: SealingKeyRing) -> any TokenStore {
        SealedTokenStore(base: base, keyRing: ring, namespace: sealingNamespace)
    }
}
#endif
