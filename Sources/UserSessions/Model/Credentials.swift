import Foundation

/// OAuth 2.0 credentials of one session.
///
/// Secrets (the access, refresh and ID tokens) never appear in ``description``, ``debugDescription``, `dump`,
/// `String(reflecting:)` or string interpolation.
public struct Credentials: Sendable, Hashable {
    /// How the credentials were obtained, as an extensible enum-like struct.
    public struct Source: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        /// From a sign-in response (``UserSessionPrototype/init(signInResponse:receivedAt:)``).
        public static let signIn = Source(rawValue: "sign_in")
        /// From a refresh-token grant.
        public static let refresh = Source(rawValue: "refresh")
        /// Handed in through ``UserSessionController/updateCredentials(_:)`` or a prototype.
        public static let external = Source(rawValue: "external")
        public var description: String { rawValue }
    }

    /// The access token. A secret.
    public var accessToken: String
    /// The refresh token, if any. A secret.
    public var refreshToken: String?
    /// The token type, usually `Bearer`.
    public var tokenType: String?
    /// When the access token expires; `nil` means it does not expire.
    public var expiresAt: Date?
    /// When the credentials were last obtained or refreshed.
    public var lastRefreshedAt: Date?
    /// How the credentials were obtained.
    public var source: Source
    /// Permissions (scopes) granted.
    public var grantedPermissions: Set<String>
    /// Permissions (scopes) the user declined.
    public var declinedPermissions: Set<String>
    /// The OpenID Connect ID token the session was signed in with, if any: kept for RP-initiated logout
    /// (`id_token_hint`). A secret, stored with the other tokens; refreshes keep it.
    public var idToken: String?
    /// The key the tokens are bound to with DPoP (RFC 9449), when the session was signed in with it: made at
    /// sign-in, kept by every store beside the tokens and by every refresh, so proofs are always signed with it. A
    /// secret; `nil` for bearer tokens.
    public var dpopKey: DPoPKey?

    /// Creates credentials.
    public init(
        accessToken: String,
        refreshToken: String? = nil,
        tokenType: String? = "Bearer",
        expiresAt: Date? = nil,
        lastRefreshedAt: Date? = nil,
        source: Source = .external,
        grantedPermissions: Set<String> = [],
        declinedPermissions: Set<String> = [],
        idToken: String? = nil,
        dpopKey: DPoPKey? = nil
    ) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.tokenType = tokenType
        self.expiresAt = expiresAt
        self.lastRefreshedAt = lastRefreshedAt
        self.source = source
        self.grantedPermissions = grantedPermissions
        self.declinedPermissions = declinedPermissions
        self.idToken = idToken
        self.dpopKey = dpopKey
    }

    /// Whether the access token has expired at `date`.
    public func isExpired(at date: Date) -> Bool {
        guard let expiresAt else { return false }
        return expiresAt <= date
    }

    /// Whether these credentials can be refreshed (they carry a refresh token).
    public var isRefreshable: Bool { refreshToken.map { !$0.isEmpty } ?? false }
}
