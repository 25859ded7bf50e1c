#if Hummingbird || Vapor
import Foundation

/// What the server keeps for one signed-in browser: whose session it is and when it ends.
///
/// Stored under the ``WebSessionKey`` of the browser's cookie. It holds no token: the user's credentials stay in
/// the registry's token store, under ``identifier``.
public struct WebSessionRecord: Sendable, Hashable, Codable {
    /// The format of the record; readers refuse others with ``WebSessionError/Code/storeCorrupt``.
    public static let formatVersion = 1

    /// The record's format (``formatVersion``).
    public var version: Int
    /// The user's session identifier in the `UserSessionRegistry`.
    public var identifier: String
    /// The ID token's `sub`.
    public var subject: String
    /// The ID token's `sid` (the provider's session), when it sent one.
    public var sessionID: String?
    /// The claims ``WebSessions`` shows at `GET <prefix>/user`: `sub`, `name`, `email` and the string claims of the
    /// user's `UserInfo`. Never a token.
    public var claims: [String: String]
    /// When the browser signed in.
    public var createdAt: Date
    /// When the browser was last seen (updated at most once per ``WebSessionConfiguration/touchInterval``).
    public var lastSeenAt: Date
    /// When the record ends whatever the browser does: `createdAt` plus the absolute lifetime.
    public var absoluteExpiresAt: Date

    /// Creates a record.
    public init(
        identifier: String, subject: String, sessionID: String?, claims: [String: String], createdAt: Date,
        lastSeenAt: Date, absoluteExpiresAt: Date
    ) {
        self.version = Self.formatVersion
        self.identifier = identifier
        self.subject = subject
        self.sessionID = sessionID
        self.claims = claims
        self.createdAt = createdAt
        self.lastSeenAt = lastSeenAt
        self.absoluteExpiresAt = absoluteExpiresAt
    }

    /// Whether the record has ended at `now`: past its absolute expiry, or idle longer than `idleTimeout`.
    public func isExpired(at now: Date, idleTimeout: Duration) -> Bool {
        now >= absoluteExpiresAt || now.timeIntervalSince(lastSeenAt) >= idleTimeout.timeInterval
    }

    /// The record read from `data` (JSON), or ``WebSessionError/Code/storeCorrupt``.
    public static func decode(_ data: Data) throws(WebSessionError) -> WebSessionRecord {
        let record: WebSessionRecord
        do {
            record = try JSONDecoder.webSessions.decode(WebSessionRecord.self, from: data)
        } catch {
            throw WebSessionError(.storeCorrupt, "a browser record is not readable (\(type(of: error)))")
        }
        guard record.version == formatVersion else {
            throw WebSessionError(.storeCorrupt, "a browser record has the unknown format \(record.version)")
        }
        guard !record.identifier.isEmpty else {
            throw WebSessionError(.storeCorrupt, "a browser record has no identifier")
        }
        return record
    }

    /// The record as JSON.
    public func encoded() throws(WebSessionError) -> Data {
        do {
            return try JSONEncoder.webSessions.encode(self)
        } catch {
            throw WebSessionError(.storeFailure, "a browser record cannot be encoded")
        }
    }
}

extension JSONDecoder {
    static var webSessions: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return decoder
    }
}

extension JSONEncoder {
    static var webSessions: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = .sortedKeys
        return encoder
    }
}

extension Duration {
    /// The duration in seconds.
    var timeInterval: TimeInterval {
        let (seconds, attoseconds) = components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }
}
#endif
