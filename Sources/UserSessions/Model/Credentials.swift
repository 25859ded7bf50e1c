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
    public var accessToken: String {
        get { shared.fields.accessToken }
        set { shared.fields.accessToken = newValue }
    }
    /// The refresh token, if any. A secret.
    public var refreshToken: String? {
        get { shared.fields.refreshToken }
        set { shared.fields.refreshToken = newValue }
    }
    /// The token type, usually `Bearer`.
    public var tokenType: String? {
        get { shared.fields.tokenType }
        set { shared.fields.tokenType = newValue }
    }
    /// When the access token expires; `nil` means it does not expire.
    public var expiresAt: Date? {
        get { shared.fields.expiresAt }
        set { shared.fields.expiresAt = newValue }
    }
    /// When the credentials were last obtained or refreshed.
    public var lastRefreshedAt: Date? {
        get { shared.fields.lastRefreshedAt }
        set { shared.fields.lastRefreshedAt = newValue }
    }
    /// How the credentials were obtained.
    public var source: Source {
        get { shared.fields.source }
        set { shared.fields.source = newValue }
    }
    /// Permissions (scopes) granted.
    public var grantedPermissions: Set<String> {
        get { shared.fields.grantedPermissions }
        set { shared.fields.grantedPermissions = newValue }
    }
    /// Permissions (scopes) the user declined.
    public var declinedPermissions: Set<String> {
        get { shared.fields.declinedPermissions }
        set { shared.fields.declinedPermissions = newValue }
    }
    /// The OpenID Connect ID token the session was signed in with, if any: kept for RP-initiated logout
    /// (`id_token_hint`). A secret, stored with the other tokens; refreshes keep it.
    public var idToken: String? {
        get { shared.fields.idToken }
        set { shared.fields.idToken = newValue }
    }
    /// The key the tokens are bound to with DPoP (RFC 9449), when the session was signed in with it: made at
    /// sign-in, kept by every store beside the tokens and by every refresh, so proofs are always signed with it. A
    /// secret; `nil` for bearer tokens.
    public var dpopKey: DPoPKey? {
        get { shared.fields.dpopKey }
        set { shared.fields.dpopKey = newValue }
    }

    /// The fields, as one value.
    struct Fields: Hashable, Sendable {
        var accessToken: String
        var refreshToken: String?
        var tokenType: String?
        var expiresAt: Date?
        var lastRefreshedAt: Date?
        var source: Source
        var grantedPermissions: Set<String>
        var declinedPermissions: Set<String>
        var idToken: String?
        var dpopKey: DPoPKey?
    }

    /// The fields, shared by every copy (see ``SharedFields``).
    private var shared: SharedFields<Fields>

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
        shared = SharedFields(
            Fields(
                accessToken: accessToken, refreshToken: refreshToken, tokenType: tokenType, expiresAt: expiresAt,
                lastRefreshedAt: lastRefreshedAt, source: source, grantedPermissions: grantedPermissions,
                declinedPermissions: declinedPermissions, idToken: idToken, dpopKey: dpopKey))
    }

    /// Changes several fields at once: one new shared object, where setting them one by one makes one per field.
    mutating func change(_ body: (inout Fields) throws -> Void) rethrows {
        try body(&shared.fields)
    }

    /// Whether the access token has expired at `date`.
    public func isExpired(at date: Date) -> Bool {
        guard let expiresAt else { return false }
        return expiresAt <= date
    }

    /// Whether these credentials can be refreshed (they carry a refresh token).
    public var isRefreshable: Bool { refreshToken.map { !$0.isEmpty } ?? false }
}
