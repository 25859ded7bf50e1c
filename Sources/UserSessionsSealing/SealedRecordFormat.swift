#if Sealing
import Crypto
import Foundation
import UserSessions

/// The sealed form of a record's credentials (format version 1).
///
/// A sealed record is a `StoredSession` like any other, so every store keeps it unchanged:
/// - `user_info` stays as it was;
/// - the credentials keep, in the clear, only what carries no secret: token type, expiry, last refresh, source and
///   permissions (a store may index or show them). The refresh token and every other secret field are absent;
/// - the access token field holds `sealed:1:<key id>:<base64 of nonce ‖ ciphertext ‖ tag>`: AES-256-GCM with a
///   fresh random 12-byte nonce per write and a 16-byte tag, under the key named by `<key id>`.
///
/// The plaintext is the whole `Credentials` in the package's JSON form (the form of its `Codable` conformance, sorted
/// keys, written and read by `CredentialsJSON`), so every field the credentials carry, secret or not, is sealed and
/// comes back exactly; what a load returns is what was sealed, never the clear copy. The associated data is
/// `"swift-user-sessions.sealed" 0x00 "1" 0x00`, then the namespace and the identifier's UTF-8 bytes, each after
/// its length as a 4-byte big-endian integer: a record opens only under the namespace and identifier it was written
/// for.
package enum SealedRecordFormat {
    static let version = 1
    static let prefix = "sealed:"
    static let domain = "swift-user-sessions.sealed"

    /// The clear copy of `credentials` for the store, with `envelope` in place of the access token.
    ///
    /// Built field by field with the initializer, so a field the credentials gain later (such as an id token) is
    /// left out of the clear copy until it is added here deliberately: it is in the sealed part either way.
    static func clearCopy(of credentials: Credentials, envelope: String) -> Credentials {
        Credentials(
            accessToken: envelope,
            refreshToken: nil,
            tokenType: credentials.tokenType,
            expiresAt: credentials.expiresAt,
            lastRefreshedAt: credentials.lastRefreshedAt,
            source: credentials.source,
            grantedPermissions: credentials.grantedPermissions,
            declinedPermissions: credentials.declinedPermissions
        )
    }

    /// Seals `credentials` for `identifier` in `namespace` under `key`.
    static func seal(
        _ credentials: Credentials, identifier: String, namespace: String, key: SealingKey
    ) throws -> Credentials {
        let plaintext: [UInt8]
        do {
            plaintext = try CredentialsJSON.encode(credentials)
        } catch {
            throw UserSessionError(.storeFailure, "the credentials could not be encoded for sealing")
        }
        let combined: Data?
        do {
            combined = try AES.GCM.seal(
                plaintext, using: key.key, nonce: AES.GCM.Nonce(),
                authenticating: associatedData(identifier: identifier, namespace: namespace)
            ).combined
        } catch {
            throw UserSessionError(.storeFailure, "sealing the credentials failed")
        }
        guard let combined else {
            throw UserSessionError(.storeFailure, "sealing the credentials gave no combined form")
        }
        let envelope = "\(prefix)\(version):\(key.id):\(combined.base64EncodedString())"
        return clearCopy(of: credentials, envelope: envelope)
    }

    /// Whether `credentials` are in the sealed form (of any version).
    static func isSealed(_ credentials: Credentials) -> Bool {
        credentials.accessToken.hasPrefix(prefix)
    }

    /// The identifier of the key that sealed `credentials`, or `nil` when they are not sealed in this format.
    static func keyID(of credentials: Credentials) -> String? {
        guard case .sealed(let keyID, _) = parse(credentials.accessToken) else { return nil }
        return keyID
    }

    /// Opens sealed `credentials` stored under `identifier` in `namespace` with the keys of `ring`.
    ///
    /// - Throws: `UserSessionError.Code.storeCorrupt` with a ``SealedRecordProblem`` as the
    ///   underlying error; `UserSessionError.Code.unsupportedFormatVersion` for a newer format.
    static func open(
        _ credentials: Credentials, identifier: String, namespace: String, ring: SealingKeyRing
    ) throws -> Credentials {
        let envelope: (keyID: String, combined: Data)
        switch parse(credentials.accessToken) {
        case .notSealed: throw failure(.notSealed)
        case .malformed: throw failure(.malformed)
        case .newerVersion(let found):
            throw UserSessionError(
                .unsupportedFormatVersion, "the record is sealed in format version \(found), newer than this release's")
        case .sealed(let keyID, let combined): envelope = (keyID, combined)
        }
        guard let key = ring.key(id: envelope.keyID) else { throw failure(.unknownKey(id: envelope.keyID)) }
        let box: AES.GCM.SealedBox
        do {
            box = try AES.GCM.SealedBox(combined: envelope.combined)
        } catch {
            throw failure(.malformed)
        }
        let plaintext: Data
        do {
            plaintext = try AES.GCM.open(
                box, using: key.key, authenticating: associatedData(identifier: identifier, namespace: namespace))
        } catch {
            throw failure(.authenticationFailed)
        }
        do {
            return try CredentialsJSON.decode(plaintext)
        } catch let error as UserSessionError where error.code == .unsupportedFormatVersion {
            throw error
        } catch {
            // Authenticated, so written by a release with our key; the message must not echo the plaintext.
            throw UserSessionError(.storeCorrupt, "the sealed credentials authenticate but do not decode")
        }
    }

    /// What an access token field holds.
    private enum Parsed {
        case notSealed
        case malformed
        case newerVersion(Int)
        case sealed(keyID: String, combined: Data)
    }

    /// Splits `sealed:<version>:<key id>:<base64>` on its UTF-8 bytes (the base64 part is never scanned for `:`).
    private static func parse(_ text: String) -> Parsed {
        // The first three colons, found in place (the base64 part after them is never scanned for one).
        let utf8 = text.utf8
        func colon(after start: String.Index) -> String.Index? { utf8[start...].firstIndex(of: UInt8(ascii: ":")) }
        guard let first = colon(after: utf8.startIndex), utf8[..<first].elementsEqual("sealed".utf8) else {
            return .notSealed
        }
        let versionStart = utf8.index(after: first)
        let second = colon(after: versionStart)
        guard let found = Int(String(decoding: utf8[versionStart..<(second ?? utf8.endIndex)], as: UTF8.self)) else {
            return .malformed
        }
        if found > version { return .newerVersion(found) }
        guard found == version, let second, let third = colon(after: utf8.index(after: second)) else {
            return .malformed
        }
        let keyID = String(decoding: utf8[utf8.index(after: second)..<third], as: UTF8.self)
        // Only the canonical base64 spelling: a changed character always changes the bytes the seal checks.
        guard SealingKey.isValid(id: keyID), let combined = CanonicalBase64.decode(utf8[utf8.index(after: third)...])
        else { return .malformed }
        return .sealed(keyID: keyID, combined: combined)
    }

    private static func failure(_ problem: SealedRecordProblem) -> UserSessionError {
        UserSessionError(.storeCorrupt, "the sealed record cannot be opened: \(problem)", underlying: problem)
    }

    /// The associated data: domain, version, then the namespace and identifier bytes, each after its length.
    package static func associatedData(identifier: String, namespace: String) -> [UInt8] {
        var data: [UInt8] = []
        data.reserveCapacity(domain.utf8.count + 11 + namespace.utf8.count + identifier.utf8.count)
        data.append(contentsOf: domain.utf8)
        data.append(0)
        data.append(contentsOf: "\(version)".utf8)
        data.append(0)
        for field in [namespace, identifier] {
            let count = UInt32(clamping: field.utf8.count)
            for shift: UInt32 in [24, 16, 8, 0] { data.append(UInt8(truncatingIfNeeded: count >> shift)) }
            data.append(contentsOf: field.utf8)
        }
        return data
    }
}
#endif
