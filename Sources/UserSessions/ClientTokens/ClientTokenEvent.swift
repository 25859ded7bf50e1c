import Foundation

/// What a ``ClientCredentialsTokenManager`` did for one key, shown to every ``UserSessionObserver`` of its
/// configuration through ``UserSessionObserver/observeClientToken(_:)``.
///
/// It names the key (client id, scopes, resources and, for a token exchange, the user and audience) and never holds
/// a token or a secret.
public struct ClientTokenEvent: Sendable, Hashable, CustomStringConvertible {
    /// What happened.
    public enum Kind: Sendable, Hashable, CustomStringConvertible {
        /// The token endpoint issued a token (a client-credentials grant, or a token exchange).
        case tokenIssued
        /// A token stored by an earlier run or another instance was adopted: nothing was sent to the token endpoint.
        case tokenAdopted
        /// A token request failed with this class; callers got the error and the key backs off.
        case requestFailed(RefreshFailureClass)
        /// The token endpoint rejected the client (HTTP 401 or `invalid_client`): the key asks no more until the
        /// client is reconfigured.
        case clientRejected
        /// Writing the token to the store failed; it is kept in memory.
        case persistenceFailed
        /// The key's token was forgotten (``ClientCredentialsTokenManager/forget(_:)``), or a user's exchanged
        /// tokens were dropped at sign-out.
        case forgotten
        /// An operation that failed authentication is replayed once with another token.
        case replayed

        /// A short form for logs, such as `requestFailed(transient)`.
        public var description: String {
            switch self {
            case .tokenIssued: "tokenIssued"
            case .tokenAdopted: "tokenAdopted"
            case .requestFailed(let failureClass): "requestFailed(\(failureClass))"
            case .clientRejected: "clientRejected"
            case .persistenceFailed: "persistenceFailed"
            case .forgotten: "forgotten"
            case .replayed: "replayed"
            }
        }
    }

    /// What happened.
    public var kind: Kind
    /// The client's id.
    public var clientID: String
    /// The scopes of the key, sorted.
    public var scopes: [String]
    /// The resource indicators of the key (RFC 8707), sorted.
    public var resources: [String]
    /// For a token exchange: the identifier of the user on whose behalf the token is.
    public var subject: String?
    /// For a token exchange: the audience the token is for.
    public var audience: String?
    /// When the token expires, for ``Kind/tokenIssued`` and ``Kind/tokenAdopted``.
    public var expiresAt: Date?
    /// How many callers were waiting for the request when it ended (besides any that started it in the background).
    public var waiters: Int
    /// How long the request took (store and token endpoint), for requests that ended.
    public var duration: Duration?
    /// Extra detail for people, such as the error that caused a failure. Never a secret.
    public var detail: String?

    /// Creates an event.
    public init(
        kind: Kind, clientID: String, scopes: [String], resources: [String], subject: String? = nil,
        audience: String? = nil, expiresAt: Date? = nil, waiters: Int = 0, duration: Duration? = nil,
        detail: String? = nil
    ) {
        self.kind = kind
        self.clientID = clientID
        self.scopes = scopes
        self.resources = resources
        self.subject = subject
        self.audience = audience
        self.expiresAt = expiresAt
        self.waiters = waiters
        self.duration = duration
        self.detail = detail
    }

    /// The kind and the key, such as `ClientTokenEvent(tokenIssued, client "api", scopes [read])`.
    public var description: String {
        var parts = ["\(kind)", "client \"\(clientID)\"", "scopes \(scopes)"]
        if !resources.isEmpty { parts.append("resources \(resources)") }
        if let subject { parts.append("subject \"\(subject)\"") }
        if let audience { parts.append("audience \"\(audience)\"") }
        if let detail { parts.append(detail) }
        return "ClientTokenEvent(\(parts.joined(separator: ", ")))"
    }
}
