import Foundation

/// How a client token is kept in a ``TokenStore``: under an identifier made only of `[a-z0-9-]` (a hash of the key's
/// canonical form, so neither a hostile scope nor a long resource list reaches a file name, a URL or SQL), as a
/// ``StoredSession`` whose user attribute `key` holds the canonical form itself. A record is adopted only when that
/// attribute equals the key byte for byte, so a hash collision is detected, never trusted.
struct ClientTokenRecord: Sendable {
    /// The attribute holding the canonical key.
    static let keyAttribute = "key"
    /// The user id of every client token record.
    static let userID = "client-token"

    let identifier: String
    let canonicalKey: String

    init(canonicalKey: String) {
        self.canonicalKey = canonicalKey
        identifier = "client-token-" + StableHash128(canonicalKey).hexDigits
    }

    /// The stored form of `credentials`.
    func stored(_ credentials: Credentials) -> StoredSession {
        StoredSession(
            userInfo: UserInfo(id: Self.userID, attributes: [Self.keyAttribute: canonicalKey]),
            credentials: credentials)
    }

    /// The credentials of `stored` when it is this key's record, else `nil`.
    func credentials(in stored: StoredSession?) -> Credentials? {
        guard let stored, let credentials = stored.credentials, !credentials.accessToken.isEmpty,
            let key = stored.userInfo.attributes[Self.keyAttribute], ExactIdentifier.areEqual(key, canonicalKey)
        else { return nil }
        return credentials
    }
}
