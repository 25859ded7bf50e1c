#if Sealing
import Foundation
import Testing
import UserSessions
import UserSessionsSealing
import UserSessionsTestSupport

/// Keys, sessions and raw-byte helpers shared by the sealed store's tests.
enum SealingFixtures {
    static let materialA = Array(repeating: UInt8(0xA1), count: 16) + Array(repeating: UInt8(0x5C), count: 16)
    static let materialB = (0..<32).map { UInt8($0 * 7 + 3) }
    static var base64A: String { Data(materialA).base64EncodedString() }
    static var base64B: String { Data(materialB).base64EncodedString() }

    static func keyA() throws -> SealingKey { try SealingKey(id: "key-a", bytes: materialA) }
    static func keyB() throws -> SealingKey { try SealingKey(id: "key-b", base64: base64B) }
    static func ringA() throws -> SealingKeyRing { try SealingKeyRing(current: keyA()) }
    static func ringB() throws -> SealingKeyRing { try SealingKeyRing(current: keyB()) }
    /// After a rotation from A to B: seals with B, still opens A.
    static func ringBA() throws -> SealingKeyRing { try SealingKeyRing(current: keyB(), previous: [keyA()]) }

    /// Credentials whose tokens are long, distinct and easy to find in raw bytes.
    ///
    /// Every token field of `Credentials` belongs here: sealing seals the credentials' whole JSON form, and
    /// ``secrets(of:)`` finds every `…_token` member, so a new token field (such as an id token) needs only its line
    /// here to be checked by every test.
    static func session(_ user: String) -> StoredSession {
        StoredSession(
            userInfo: UserInfo(id: user, email: "\(user)@example.com", name: "User \(user)"),
            credentials: Credentials(
                accessToken: "AT-\(user)-8f2c1e9b7d4a6053-access-token-value",
                refreshToken: "RT-\(user)-3b9e7a1c5f0d2846-refresh-token-value",
                expiresAt: Date(timeIntervalSinceReferenceDate: 820_000_000.123_456),
                lastRefreshedAt: Date(timeIntervalSinceReferenceDate: 819_996_400.25), source: .refresh,
                grantedPermissions: ["read"], declinedPermissions: ["admin"],
                idToken: "IT-\(user)-6d1f0a8e2c4b9735-id-token-value"))
    }

    /// The secrets of `sessions`: every token of their credentials, and the key material as it is handed in.
    static func secrets(of sessions: [StoredSession]) -> [String] {
        sessions.flatMap { SecretScan.tokens(of: $0.credentials) } + [base64A, base64B]
    }

    /// Every regular file under `directory`, read as it is on disk.
    static func rawFiles(under directory: URL) throws -> [URL: [UInt8]] {
        var files: [URL: [UInt8]] = [:]
        let enumerator = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.isRegularFileKey])
        while let url = enumerator?.nextObject() as? URL {
            guard try url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile == true else { continue }
            files[url] = Array(try Data(contentsOf: url))
        }
        return files
    }

    static func temporaryDirectory(_ label: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appending(path: "sealing-\(label)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// The problem a sealed store reported, when `body` threw ``UserSessionError/Code/storeCorrupt``.
    static func problem(_ body: () async throws -> Void) async -> SealedRecordProblem? {
        do {
            try await body()
            return nil
        } catch let error as UserSessionError where error.code == .storeCorrupt {
            return error.underlying as? SealedRecordProblem
        } catch {
            return nil
        }
    }

    /// `stored` (a sealed record as the base store holds it) with one bit flipped inside its ciphertext.
    static func flippingABit(in stored: StoredSession) throws -> StoredSession {
        var copy = stored
        let sealed = try #require(stored.credentials?.accessToken)
        let parts = sealed.split(separator: ":", omittingEmptySubsequences: false)
        try #require(parts.count == 4)
        var combined = try #require(Data(base64Encoded: String(parts[3])))
        combined[combined.startIndex + 14] ^= 0x01
        copy.credentials?.accessToken = parts[0...2].joined(separator: ":") + ":" + combined.base64EncodedString()
        return copy
    }

    /// The same sealed bytes spelled another way (the last base64 character before the padding with an unused bit
    /// set), or `nil` when the record's base64 has no padding and so only one spelling.
    static func respellingTheBase64(in stored: StoredSession) throws -> StoredSession? {
        var copy = stored
        let sealed = try #require(stored.credentials?.accessToken)
        let parts = sealed.split(separator: ":", omittingEmptySubsequences: false)
        try #require(parts.count == 4)
        var base64 = Array(parts[3])
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
        guard let last = base64.lastIndex(where: { $0 != "=" }), last < base64.count - 1,
            let index = alphabet.firstIndex(of: base64[last])
        else { return nil }
        base64[last] = alphabet[index | 1]
        copy.credentials?.accessToken = parts[0...2].joined(separator: ":") + ":" + String(base64)
        return copy
    }

    /// The key identifier a sealed record (as the base store holds it) names.
    static func keyID(of stored: StoredSession?) -> String? {
        guard let sealed = stored?.credentials?.accessToken, sealed.hasPrefix("sealed:") else { return nil }
        let parts = sealed.split(separator: ":", omittingEmptySubsequences: false)
        return parts.count == 4 ? String(parts[2]) : nil
    }
}
#endif
