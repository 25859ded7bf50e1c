import Foundation

/// A ``TokenStore`` that speaks the classic remote token-cache endpoint protocol, so an existing backend of that
/// kind works unchanged.
///
/// - Save: `POST` to ``endpoint`` with the form fields `unique_id` and `token_info`.
/// - Fetch: `GET endpoint?unique_id=…`.
/// - Clear: save `token_info={}`, which reads back as "nothing stored".
/// - Responses: `{"status": "true"|"false", "token_info": "…", "errorCode": "…", "errorMessage": "…"}`.
///
/// `unique_id` is not the raw identifier: servers build file names from it, so the store sends a traversal-proof
/// form that uses only `[a-z0-9_-]` — `u-` followed by the identifier's UTF-8 bytes with everything but `a`–`z`,
/// `0`–`9` and `-` written as `_XX` (so `ee977806d72865` becomes `u-ee977806d72865`), or `h-` and a 128-bit hash for
/// identifiers whose encoding would exceed 200 bytes. The same encoding names ``FileTokenStore``'s files.
///
/// `token_info` is a JSON string holding ``StoredSession``'s `Codable` form (`user_info`, `credentials`, and
/// `refresh_token_refused: true` once the authorization server refused the refresh token for good) plus
/// `identifier`, the full session identifier, so a hashed `unique_id` shared by two identifiers is detected.
/// Dates are strings formatted `yyyy-MM-dd'T'HH:mm:ss.SSSZZZ` (`en_US_POSIX`, UTC), so they keep millisecond
/// precision. The current identifier is stored under the reserved `unique_id`
/// ``Configuration/currentIdentifierKey`` (default `current-identifier`, which no encoded identifier can equal) as
/// `{"current_identifier": "…"}`.
///
/// The form body is `application/x-www-form-urlencoded` with every byte but `A`–`Z`, `a`–`z`, `0`–`9`, `-`, `.`,
/// `_`, `~` percent-encoded (a space is `%20`, a plus sign `%2B`), so tokens containing `&`, `=`, `+`, `%`, spaces or
/// non-ASCII characters round-trip.
///
/// Requests go through an ``HTTPTransport`` (by default a ``URLSessionHTTPTransport`` owned by the store), without
/// blocking a thread, each bounded by ``Configuration/requestTimeout`` and reading at most 1 MiB of response body
/// (a longer one is cut off unread and is a ``UserSessionError/Code/transportFailure``). Redirects are not followed
/// (a redirect could carry tokens to another host); a redirect response is a
/// ``UserSessionError/Code/transportFailure``. Cancelling the calling task cancels the request and throws
/// `CancellationError`; a save that was cancelled may or may not have reached the server.
///
/// - Important: The protocol cannot list what is stored: ``storedIdentifiers()`` throws.
public final class RemoteTokenStore: TokenStore {
    /// Settings of a remote store. Every field has a default.
    public struct Configuration: Sendable {
        /// How long one request may take, from sending to the whole response. Default 10 s. Values that are not
        /// positive mean the default.
        public var requestTimeout: Duration
        /// The reserved `unique_id` under which the current identifier is stored. Default `current-identifier`.
        /// It must be 1–200 characters of `[a-z0-9_-]` and must not start with `u-` or `h-` (those name sessions).
        public var currentIdentifierKey: String

        /// Creates a configuration.
        public init(requestTimeout: Duration = .seconds(10), currentIdentifierKey: String = "current-identifier") {
            self.requestTimeout = requestTimeout
            self.currentIdentifierKey = currentIdentifierKey
        }
    }

    /// The token-cache endpoint.
    public let endpoint: URL
    /// The settings.
    public let configuration: Configuration
    private let client: GuardedHTTPClient

    /// Creates a store talking to `endpoint`. No request is made here.
    ///
    /// - Parameters:
    ///   - endpoint: The token-cache endpoint: `https`, or `http` to a loopback host.
    ///   - configuration: The settings.
    ///   - transport: The transport requests go through; `nil` (the default) creates a
    ///     ``URLSessionHTTPTransport`` for this store.
    /// - Throws: ``UserSessionError/Code/insecureEndpoint`` when `endpoint` is not `https`, unless it is `http` to a
    ///   loopback host (`localhost`, `127.0.0.0/8`, `::1`); ``UserSessionError/Code/invalidIdentifier`` when
    ///   ``Configuration/currentIdentifierKey`` is not usable.
    public init(
        endpoint: URL, configuration: Configuration = Configuration(), transport: (any HTTPTransport)? = nil
    ) throws {
        try Self.checkEndpoint(endpoint)
        try Self.checkCurrentIdentifierKey(configuration.currentIdentifierKey)
        var configuration = configuration
        if configuration.requestTimeout <= .zero { configuration.requestTimeout = .seconds(10) }
        self.endpoint = endpoint
        self.configuration = configuration
        client = GuardedHTTPClient(transport: transport, endpointName: "the token cache")
    }

    /// Fetches the session stored for `identifier`.
    ///
    /// - Returns: `nil` when the server answers error code `50002` (nothing stored) or empty token information
    ///   (`""` or `{}`, which is what a clear leaves).
    /// - Throws: ``UserSessionError`` with ``UserSessionError/Code/invalidIdentifier`` for an unusable identifier;
    ///   ``UserSessionError/Code/remoteStoreRejected`` (with ``UserSessionError/remoteErrorCode``) for any other
    ///   `"false"` status; ``UserSessionError/Code/storeCorrupt`` when the stored token information cannot be read;
    ///   ``UserSessionError/Code/unsupportedFormatVersion`` for credentials of a newer format;
    ///   ``UserSessionError/Code/storeFailure`` when the stored record belongs to another identifier with the same
    ///   hashed `unique_id`; ``UserSessionError/Code/transportFailure`` for network errors, timeouts, non-2xx or
    ///   non-JSON responses; `CancellationError` when the calling task is cancelled.
    public func load(identifier: String) async throws -> StoredSession? {
        let uniqueID = try IdentifierEncoding.name(for: identifier).value
        guard let tokenInfo = try await fetch(uniqueID: uniqueID) else { return nil }
        let (session, recorded) = try RemoteTokenCacheProtocol.decodeSession(tokenInfo)
        if let recorded, !ExactIdentifier.areEqual(recorded, identifier) {
            throw UserSessionError(.storeFailure, "the token cache record \(uniqueID) belongs to another identifier")
        }
        return session
    }

    /// Stores `session` under `identifier` with one `POST`.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier``; ``UserSessionError/Code/remoteStoreRejected`` for a
    ///   `"false"` status (for example `50001`, write failure); ``UserSessionError/Code/transportFailure``;
    ///   `CancellationError`.
    public func save(_ session: StoredSession, identifier: String) async throws {
        let uniqueID = try IdentifierEncoding.name(for: identifier).value
        let tokenInfo = try RemoteTokenCacheProtocol.encodeSession(session, identifier: identifier)
        let secrets = [
            session.credentials?.accessToken, session.credentials?.refreshToken, session.credentials?.idToken,
        ]
        .compactMap { $0 }
        try await store(uniqueID: uniqueID, tokenInfo: tokenInfo, secrets: secrets)
    }

    /// Clears what is stored under `identifier`. Clearing nothing is not an error.
    ///
    /// The protocol has no delete, and any `POST` creates a record, so this fetches first and saves
    /// `token_info={}` only when something is stored: removing an identifier that was never stored makes one `GET`
    /// and leaves no trace on the server. A record that names another identifier (a shared hashed `unique_id`) is
    /// not this identifier's to clear and is left alone.
    ///
    /// - Note: Between the fetch and the save another process may write the same record. A remove that found
    ///   nothing takes effect at its fetch (before that write, which then stays); one that found a record takes
    ///   effect at its save (after it, so the write is cleared). Either order is one the two callers could have
    ///   seen had they run one after the other. Within one process a controller never overlaps its own writes.
    ///
    /// - Throws: as ``load(identifier:)`` for the fetch (except ``UserSessionError/Code/storeCorrupt``: a corrupt
    ///   record is cleared) and as ``save(_:identifier:)`` for the save.
    public func remove(identifier: String) async throws {
        let uniqueID = try IdentifierEncoding.name(for: identifier).value
        guard let tokenInfo = try await fetch(uniqueID: uniqueID) else { return }
        if let recorded = (try? RemoteTokenCacheProtocol.decodeSession(tokenInfo))?.identifier,
            !ExactIdentifier.areEqual(recorded, identifier)
        {
            return
        }
        try await store(uniqueID: uniqueID, tokenInfo: "{}", secrets: [])
    }

    /// Fetches the identifier stored under ``Configuration/currentIdentifierKey``.
    ///
    /// - Throws: as ``load(identifier:)``; ``UserSessionError/Code/storeCorrupt`` when the record does not hold a
    ///   valid identifier.
    public func loadCurrentIdentifier() async throws -> String? {
        guard let tokenInfo = try await fetch(uniqueID: configuration.currentIdentifierKey) else { return nil }
        let identifier = try RemoteTokenCacheProtocol.decodeCurrentIdentifier(tokenInfo)
        guard (try? IdentifierEncoding.validate(identifier)) != nil else {
            throw UserSessionError(.storeCorrupt, "the token cache holds an invalid current identifier")
        }
        return identifier
    }

    /// Stores the current identifier under ``Configuration/currentIdentifierKey``; `nil` clears it, fetching first
    /// and saving `{}` only when something is stored, as ``remove(identifier:)`` does.
    ///
    /// - Throws: as ``save(_:identifier:)``.
    public func saveCurrentIdentifier(_ identifier: String?) async throws {
        let key = configuration.currentIdentifierKey
        guard let identifier else {
            guard try await fetch(uniqueID: key) != nil else { return }
            return try await store(uniqueID: key, tokenInfo: "{}", secrets: [])
        }
        try IdentifierEncoding.validate(identifier)
        try await store(
            uniqueID: key, tokenInfo: try RemoteTokenCacheProtocol.encodeCurrentIdentifier(identifier), secrets: [])
    }

    /// Always throws: the remote token-cache protocol has no way to list what is stored.
    ///
    /// - Throws: ``UserSessionError/Code/storeFailure``.
    public func storedIdentifiers() async throws -> [String] {
        throw UserSessionError(.storeFailure, "listing stored identifiers is not supported by the remote protocol")
    }

    // MARK: - Requests

    /// `GET ?unique_id=…`; the token information, or `nil` when nothing is stored.
    private func fetch(uniqueID: String) async throws -> String? {
        guard var components = URLComponents(url: endpoint, resolvingAgainstBaseURL: false) else {
            throw UserSessionError(.transportFailure, "cannot build a request URL from the endpoint")
        }
        let query = "unique_id=" + FormURLEncoding.percentEncode(uniqueID)
        components.percentEncodedQuery = components.percentEncodedQuery.map { "\($0)&\(query)" } ?? query
        guard let url = components.url else {
            throw UserSessionError(.transportFailure, "cannot build a request URL from the endpoint")
        }
        let response = try await send(.get, url, body: nil)
        guard response.status else {
            if response.errorCode == RemoteTokenCacheProtocol.ErrorCode.nothingStored { return nil }
            throw Self.rejection(response, secrets: [])
        }
        return response.tokenInfo
    }

    /// `POST unique_id=…&token_info=…`.
    private func store(uniqueID: String, tokenInfo: String, secrets: [String]) async throws {
        let body = Data(FormURLEncoding.encode([("unique_id", uniqueID), ("token_info", tokenInfo)]).utf8)
        let response = try await send(.post, endpoint, body: body)
        guard response.status else { throw Self.rejection(response, secrets: secrets) }
    }

    private func send(
        _ method: HTTPTransportRequest.Method, _ url: URL, body: Data?
    ) async throws -> RemoteTokenCacheProtocol.Response {
        var headers: HTTPTransportHeaders = [("Accept", "application/json")]
        if body != nil { headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded; charset=utf-8") }
        let response: HTTPTransportResponse
        do {
            response = try await client.send(
                method, url, headers: headers, body: body, timeout: configuration.requestTimeout)
        } catch let failure as HTTPExchangeFailure {
            if failure.kind == .cancelled { throw CancellationError() }
            throw UserSessionError(.transportFailure, failure.message, underlying: failure.underlying)
        }
        // A protocol-level rejection is reported as such even when the server also set an error status code.
        if let parsed = try? RemoteTokenCacheProtocol.parseResponse(response.body), !parsed.status,
            parsed.errorCode != nil
        {
            return parsed
        }
        guard (200..<300).contains(response.statusCode) else {
            throw UserSessionError(.transportFailure, "the token cache answered HTTP \(response.statusCode)")
        }
        return try RemoteTokenCacheProtocol.parseResponse(response.body)
    }

    private static func rejection(_ response: RemoteTokenCacheProtocol.Response, secrets: [String]) -> UserSessionError
    {
        var message = response.errorMessage ?? "no message"
        // A server may echo what it was sent; never let a token (or a part of the message around it) into an error.
        if secrets.contains(where: { !$0.isEmpty && message.contains($0) }) {
            message = "<message withheld: it contained a token>"
        }
        let code = response.errorCode ?? "none"
        return UserSessionError(
            .remoteStoreRejected,
            "the token cache rejected the request (error \(code)): \(message)",
            remoteErrorCode: response.errorCode
        )
    }
}
