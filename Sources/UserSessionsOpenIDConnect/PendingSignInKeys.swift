#if OpenIDConnect
import Crypto
import Foundation

/// The keys that seal a pending sign-in for the browser that started it (AES-256-GCM).
///
/// ``OpenIDConnectClient/authorizationRedirect(_:replacing:)`` seals the pending sign-in (its `state`, `nonce`, PKCE
/// verifier and context) with the current key; ``OpenIDConnectClient/completeSignIn(callbackQuery:sealedPendingSignIn:)``
/// opens it with the current key or any previous one. Give every instance of a fleet the same keys, so a callback can
/// reach any of them with no shared store. To rotate: make the new key current and keep the old one among
/// the previous ones for one ``OpenIDConnectConfiguration/pendingSignInLifetime``, then drop it.
///
/// The default, ``random()``, is one key made when the configuration is created: enough for one process, but a
/// callback reaching another process (or arriving after a restart) is refused with
/// ``OpenIDConnectError/Code/pendingSignInUnreadable``.
public struct PendingSignInKeys: Sendable {
    /// The key that seals new pending sign-ins.
    let current: SymmetricKey
    /// Earlier keys, still accepted when a pending sign-in sealed with them comes back.
    let previous: [SymmetricKey]

    /// Keys from raw bytes: `current` seals, `current` and `previous` open. Each is exactly 32 bytes (256 bits)
    /// from a cryptographically secure generator; keep them as secret as a client secret.
    ///
    /// - Throws: ``OpenIDConnectError/Code/invalidConfiguration`` for a key that is not 32 bytes long.
    public init(current: Data, previous: [Data] = []) throws(OpenIDConnectError) {
        func key(_ bytes: Data) throws(OpenIDConnectError) -> SymmetricKey {
            let key = SymmetricKey(data: bytes)
            guard key.bitCount == 256 else {
                throw OpenIDConnectError(
                    .invalidConfiguration, "a pending sign-in key must be 32 bytes, not \(key.bitCount / 8)",
                    failureClass: .misconfiguration)
            }
            return key
        }
        self.current = try key(current)
        var earlier: [SymmetricKey] = []
        for bytes in previous { earlier.append(try key(bytes)) }
        self.previous = earlier
    }

    private init(random: Void) {
        current = SymmetricKey(size: .bits256)
        previous = []
    }

    /// One fresh random key, known to this process only.
    public static func random() -> PendingSignInKeys { PendingSignInKeys(random: ()) }

    /// The prefix of every sealed pending sign-in: the format's version.
    static let prefix = "p1."

    /// The longest sealed pending sign-in accepted back (a cookie holds at most 4,096 bytes).
    static let maximumSealedLength = 3_800

    /// `pending` sealed with the current key, bound to `binding` (the issuer and the client id), as base64url text.
    func seal(_ pending: PendingSignIn, binding: String) throws(OpenIDConnectError) -> String {
        let plaintext: Data
        let box: AES.GCM.SealedBox
        do {
            plaintext = try JSONEncoder().encode(pending)
            box = try AES.GCM.seal(plaintext, using: current, authenticating: Data(binding.utf8))
        } catch {
            throw OpenIDConnectError(.invalidConfiguration, "the pending sign-in cannot be sealed (\(type(of: error)))")
        }
        guard let combined = box.combined else {
            throw OpenIDConnectError(.invalidConfiguration, "the pending sign-in cannot be sealed")
        }
        let sealed = Self.prefix + base64URLEncode(combined)
        guard sealed.utf8.count <= Self.maximumSealedLength else {
            throw OpenIDConnectError(
                .invalidConfiguration,
                "the pending sign-in takes \(sealed.utf8.count) bytes sealed, more than a cookie holds "
                    + "(\(Self.maximumSealedLength)); keep less in AuthorizationOptions.context",
                failureClass: .misconfiguration)
        }
        return sealed
    }

    /// The pending sign-in in `sealed`, opened with the current key or a previous one; `nil` when none opens it
    /// (another key, another client, a change of a single bit) or it is not one.
    func open(_ sealed: String, binding: String) -> PendingSignIn? {
        guard sealed.utf8.count <= Self.maximumSealedLength, sealed.hasPrefix(Self.prefix),
            let combined = base64URLDecode(sealed.dropFirst(Self.prefix.count)),
            let box = try? AES.GCM.SealedBox(combined: combined)
        else { return nil }
        for key in [current] + previous {
            if let plaintext = try? AES.GCM.open(box, using: key, authenticating: Data(binding.utf8)) {
                return try? JSONDecoder().decode(PendingSignIn.self, from: plaintext)
            }
        }
        return nil
    }
}
#endif
