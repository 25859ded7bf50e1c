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
        get { box.fields.accessToken }
        set { change { $0.accessToken = newValue } }
    }
    /// The refresh token, if any. A secret.
    public var refreshToken: String? {
        get { box.fields.refreshToken }
        set { change { $0.refreshToken = newValue } }
    }
    /// The token type, usually `Bearer`.
    public var tokenType: String? {
        get { box.fields.tokenType }
        set { change { $0.tokenType = newValue } }
    }
    /// When the access token expires; `nil` means it does not expire.
    public var expiresAt: Date? {
        get { box.fields.expiresAt }
        set { change { $0.expiresAt = newValue } }
    }
    /// When the credentials were last obtained or refreshed.
    public var lastRefreshedAt: Date? {
        get { box.fields.lastRefreshedAt }
        set { change { $0.lastRefreshedAt = newValue } }
    }
    /// How the credentials were obtained.
    public var source: Source {
        get { box.fields.source }
        set { change { $0.source = newValue } }
    }
    /// Permissions (scopes) granted.
    public var grantedPermissions: Set<String> {
        get { box.fields.grantedPermissions }
        set { change { $0.grantedPermissions = newValue } }
    }
    /// Permissions (scopes) the user declined.
    public var declinedPermissions: Set<String> {
        get { box.fields.declinedPermissions }
        set { change { $0.declinedPermissions = newValue } }
    }
    /// The OpenID Connect ID token the session was signed in with, if any: kept for RP-initiated logout
    /// (`id_token_hint`). A secret, stored with the other tokens; refreshes keep it.
    public var idToken: String? {
        get { box.fields.idToken }
        set { change { $0.idToken = newValue } }
    }
    /// The key the tokens are bound to with DPoP (RFC 9449), when the session was signed in with it: made at
    /// sign-in, kept by every store beside the tokens and by every refresh, so proofs are always signed with it. A
    /// secret; `nil` for bearer tokens.
    public var dpopKey: DPoPKey? {
        get { box.fields.dpopKey }
        set { change { $0.dpopKey = newValue } }
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

    /// The fields in one immutable object that every copy shares. A session's credentials are held at once by
    /// its view (the gate's machine), by the ledger's entry as the identifier's newest, and by the refresh in
    /// flight; each copy is one word and one reference count, not ten fields and eight counts. A setter makes a new
    /// object: credentials change as a whole, at a refresh or a sign-in, not field by field.
    final class Box: Sendable {
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var box: Box

    /// Replaces the fields with `body`'s change of them (copies never see it).
    private mutating func change(_ body: (inout Fields) -> Void) {
        var fields = box.fields
        body(&fields)
        box = Box(fields)
    }

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
        box = Box(
            Fields(
                accessToken: accessToken, refreshToken: refreshToken, tokenType: tokenType, expiresAt: expiresAt,
                lastRefreshedAt: lastRefreshedAt, source: source, grantedPermissions: grantedPermissions,
                declinedPermissions: declinedPermissions, idToken: idToken, dpopKey: dpopKey))
    }

    /// Equal when every field is: copies of one value compare without looking at a field.
    public static func == (lhs: Credentials, rhs: Credentials) -> Bool {
        lhs.box === rhs.box || lhs.box.fields == rhs.box.fields
    }

    public func hash(into hasher: inout Hasher) {
        box.fields.hash(into: &hasher)
    }

    /// Whether the access token has expired at `date`.
    public func isExpired(at date: Date) -> Bool {
        guard let expiresAt else { return false }
        return expiresAt <= date
    }

    /// Whether these credentials can be refreshed (they carry a refresh token).
    public var isRefreshable: Bool { refreshToken.map { !$0.isEmpty } ?? false }
}
