import Foundation

/// The wire format of the classic remote token-cache endpoint, without any networking.
///
/// - Save: `POST` form fields `unique_id` and `token_info` (a JSON string).
/// - Fetch: `GET ?unique_id=…`.
/// - Response: `{"status": "true"|"false", "token_info": "…", "errorCode": "…", "errorMessage": "…"}`.
enum RemoteTokenCacheProtocol {
    /// Error codes of the protocol.
    enum ErrorCode {
        static let invalidInput = "30001"
        static let writeFailure = "50001"
        static let nothingStored = "50002"
        static let unsupportedMethod = "50003"
    }

    /// A decoded response.
    struct Response: Equatable {
        var status: Bool
        /// `nil` when absent, empty or `{}`.
        var tokenInfo: String? = nil
        var errorCode: String? = nil
        var errorMessage: String? = nil
    }

    /// The `token_info` date format: `yyyy-MM-dd'T'HH:mm:ss.SSSZZZ`, `en_US_POSIX`, UTC.
    static let dateFormat = "yyyy-MM-dd'T'HH:mm:ss.SSSZZZ"

    /// The longest server message copied into an error.
    static let maximumMessageLength = 200

    /// Parses a response body.
    ///
    /// - Throws: ``UserSessionError/Code/transportFailure`` when the body is not a JSON object with a `status` of
    ///   `"true"` or `"false"` (an HTML error page, for example), or has duplicate members or nesting deeper than
    ///   128 levels (``StrictJSONScan``).
    static func parseResponse(_ data: Data) throws -> Response {
        let document: ParsedJSON
        do {
            document = try StrictJSON.parse(data)
        } catch .refused(let failure) {
            throw UserSessionError(.transportFailure, "the token cache answered with a body that is \(failure)")
        } catch .unreadable(let error) {
            throw UserSessionError(
                .transportFailure,
                "the token cache answered with a body that is not JSON",
                underlying: error
            )
        }
        guard let members = document.objectValue else {
            throw UserSessionError(
                .transportFailure, "the token cache answered with \(document.typeName), not an object")
        }
        let status: Bool
        switch members["status"] {
        case .string("true"), .bool(true): status = true
        case .string("false"), .bool(false): status = false
        default: throw UserSessionError(.transportFailure, "the token cache answered without a valid status")
        }
        var tokenInfo: String?
        switch members["token_info"] {
        case .string(let string): tokenInfo = string
        // Lenient: some backends send the object itself instead of a JSON string.
        case .object(let object) where !object.isEmpty:
            tokenInfo = String(decoding: try JSONEncoder().encode(object), as: UTF8.self)
        default: tokenInfo = nil
        }
        if let info = tokenInfo, isEmptyTokenInfo(info) { tokenInfo = nil }
        let errorCode: String? =
            switch members["errorCode"] {
            case .string(let string): string
            case .integer(let integer): String(integer)
            default: nil
            }
        let errorMessage = members["errorMessage"]?.stringValue.map { String($0.prefix(maximumMessageLength)) }
        return Response(status: status, tokenInfo: tokenInfo, errorCode: errorCode, errorMessage: errorMessage)
    }

    /// Whether `tokenInfo` means "nothing stored": empty, whitespace, `{}` or `null`.
    static func isEmptyTokenInfo(_ tokenInfo: String) -> Bool {
        let trimmed = tokenInfo.filter { !$0.isWhitespace }
        return trimmed.isEmpty || trimmed == "{}" || trimmed == "null"
    }

    /// The members of a session's `token_info`: ``StoredSession``'s `Codable` form plus `identifier`, the full
    /// session identifier (so that a hashed `unique_id` shared by two identifiers is detected).
    ///
    /// `refresh_token_refused` is written only when it is `true`, as ``StoredSession`` writes it, so the records of
    /// sessions that were never refused keep the format existing backends know.
    private struct SessionTokenInfo: Codable {
        var identifier: String?
        var userInfo: UserInfo
        var credentials: Credentials?
        var refreshTokenRefused: Bool

        enum CodingKeys: String, CodingKey {
            case identifier
            case userInfo = "user_info"
            case credentials
            case refreshTokenRefused = "refresh_token_refused"
        }

        init(identifier: String?, session: StoredSession) {
            self.identifier = identifier
            self.userInfo = session.userInfo
            self.credentials = session.credentials
            self.refreshTokenRefused = session.refreshTokenRefused
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            identifier = try container.decodeIfPresent(String.self, forKey: .identifier)
            userInfo = try container.decode(UserInfo.self, forKey: .userInfo)
            credentials = try container.decodeIfPresent(Credentials.self, forKey: .credentials)
            refreshTokenRefused = try container.decodeIfPresent(Bool.self, forKey: .refreshTokenRefused) ?? false
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encodeIfPresent(identifier, forKey: .identifier)
            try container.encode(userInfo, forKey: .userInfo)
            try container.encodeIfPresent(credentials, forKey: .credentials)
            if refreshTokenRefused { try container.encode(true, forKey: .refreshTokenRefused) }
        }
    }

    /// The members of the current-identifier record's `token_info`.
    private struct CurrentIdentifierTokenInfo: Codable {
        var currentIdentifier: String

        enum CodingKeys: String, CodingKey {
            case currentIdentifier = "current_identifier"
        }
    }

    static func encodeSession(_ session: StoredSession, identifier: String) throws -> String {
        try encode(SessionTokenInfo(identifier: identifier, session: session))
    }

    /// Decodes a session's `token_info` and the identifier recorded in it, if any.
    ///
    /// - Throws: ``UserSessionError/Code/storeCorrupt`` when it cannot be read (also for duplicate members);
    ///   ``UserSessionError/Code/unsupportedFormatVersion`` for credentials of a newer version.
    static func decodeSession(_ tokenInfo: String) throws -> (session: StoredSession, identifier: String?) {
        let decoded = try decode(SessionTokenInfo.self, from: tokenInfo)
        let session = StoredSession(
            userInfo: decoded.userInfo, credentials: decoded.credentials,
            refreshTokenRefused: decoded.refreshTokenRefused)
        return (session, decoded.identifier)
    }

    static func encodeCurrentIdentifier(_ identifier: String) throws -> String {
        try encode(CurrentIdentifierTokenInfo(currentIdentifier: identifier))
    }

    static func decodeCurrentIdentifier(_ tokenInfo: String) throws -> String {
        try decode(CurrentIdentifierTokenInfo.self, from: tokenInfo).currentIdentifier
    }

    private static func encode(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(makeDateFormatter().string(from: date))
        }
        let json: String
        do {
            json = String(decoding: try encoder.encode(value), as: UTF8.self)
        } catch {
            throw UserSessionError(.storeFailure, "cannot encode the token information", underlying: error)
        }
        return escapingAngleBrackets(json)
    }

    /// `json` with every `<` written as `\u003c` and every `>` as `\u003e`.
    ///
    /// The classic endpoint runs PHP's `strip_tags` on what it stores, which deletes anything from a `<` that is
    /// not followed by white space up to the next `>` (or to the end): "Alice <3" would come back as "Alice " and
    /// cut the JSON short. In JSON text `<` and `>` can only occur inside strings, where the escapes decode to the
    /// same characters, so this replacement is exact and no `<` or `>` ever reaches the endpoint. `&` and NUL need
    /// nothing: `strip_tags` keeps `&`, and the encoder already writes NUL as `\u0000`.
    static func escapingAngleBrackets(_ json: String) -> String {
        guard json.utf8.contains(where: { $0 == UInt8(ascii: "<") || $0 == UInt8(ascii: ">") }) else { return json }
        var escaped: [UInt8] = []
        escaped.reserveCapacity(json.utf8.count + 16)
        for byte in json.utf8 {
            switch byte {
            case UInt8(ascii: "<"): escaped.append(contentsOf: Array(#"\u003c"#.utf8))
            case UInt8(ascii: ">"): escaped.append(contentsOf: Array(#"\u003e"#.utf8))
            default: escaped.append(byte)
            }
        }
        return String(decoding: escaped, as: UTF8.self)
    }

    private static func decode<Value: Decodable>(_ type: Value.Type, from tokenInfo: String) throws -> Value {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let string = try container.decode(String.self)
            guard hasDateShape(string), let date = makeDateFormatter().date(from: string) else {
                throw DecodingError.dataCorruptedError(
                    in: container,
                    debugDescription: "a date not in the format \(dateFormat)"
                )
            }
            return date
        }
        do {
            return try StrictJSON.decode(type, from: Data(tokenInfo.utf8), using: decoder)
        } catch .refused(let failure) {
            throw UserSessionError(.storeCorrupt, "the token cache holds token information that is \(failure)")
        } catch .unreadable(let error as UserSessionError) {
            throw error
        } catch .unreadable(let error) {
            throw UserSessionError(
                .storeCorrupt,
                "the token cache holds token information that cannot be read",
                underlying: error
            )
        }
    }

    /// Whether `string` has the exact shape ``dateFormat`` writes: `yyyy-MM-dd'T'HH:mm:ss.SSS` and a `+HHMM` or
    /// `-HHMM` offset, 28 ASCII characters. Checked before the formatter sees a date the endpoint returns: ICU's
    /// parser divides by zero (the process dies of SIGFPE) on a fraction of seconds with some thirty digits, which a
    /// hostile or broken endpoint can send. Found by the `RemoteResponse` fuzzer.
    static func hasDateShape(_ string: String) -> Bool {
        let bytes = Array(string.utf8)
        guard bytes.count == 28 else { return false }
        for (index, byte) in bytes.enumerated() {
            let expected: UInt8? =
                switch index {
                case 4, 7: UInt8(ascii: "-")
                case 10: UInt8(ascii: "T")
                case 13, 16: UInt8(ascii: ":")
                case 19: UInt8(ascii: ".")
                default: nil
                }
            if let expected {
                guard byte == expected else { return false }
            } else if index == 23 {
                guard byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-") else { return false }
            } else {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return false }
            }
        }
        return true
    }

    /// A new formatter per use: `DateFormatter` is not `Sendable`, and this is not a hot path.
    static func makeDateFormatter() -> DateFormatter {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(secondsFromGMT: 0)
        formatter.dateFormat = dateFormat
        return formatter
    }
}
