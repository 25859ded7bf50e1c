#if OpenIDConnect
import Crypto
import Foundation
import UserSessions

/// The `state`s of sign-ins this process completed, each until its pending sign-in would have expired, so a
/// callback replayed here is refused before its code reaches the provider (``PendingSignInStorage/browser``).
///
/// An entry is added only after the provider exchanged a code for it, so only real sign-ins at the provider add
/// entries, and each is dropped when it expires: nothing an anonymous client can fill. Entries are SHA-256 hashes,
/// never the `state` itself.
final class CompletedSignIns: Sendable {
    private let entries = Locked([Data: Date]())

    /// Whether `state` completed here and has not expired at `now`.
    func contains(_ state: String, now: Date) -> Bool {
        let key = Self.key(state)
        return entries.withLock { entries in
            guard let expiresAt = entries[key] else { return false }
            return expiresAt > now
        }
    }

    /// Remembers `state` until `expiresAt`; drops the entries expired at `now`.
    func insert(_ state: String, until expiresAt: Date, now: Date) {
        let key = Self.key(state)
        entries.withLock { entries in
            entries = entries.filter { $0.value > now }
            entries[key] = expiresAt
        }
    }

    /// How many are remembered.
    var count: Int { entries.withLock { $0.count } }

    private static func key(_ state: String) -> Data { Data(SHA256.hash(data: Data(state.utf8))) }
}
#endif
