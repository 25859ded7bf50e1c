#if OpenIDConnect
import Foundation
import UserSessions

/// A sign-in that was started (the browser was sent to the provider) and has not come back yet.
///
/// It holds what the callback is checked against: the `state` that names it, the `nonce` the ID token must carry
/// and the PKCE `code_verifier` the code is exchanged with. All three are secrets until the sign-in completes, and
/// its descriptions never show them. It is used once: ``OpenIDConnectStateStore/take(state:now:)`` removes it.
public struct PendingSignIn: Sendable, Hashable, Codable, CustomStringConvertible, CustomReflectable {
    /// The `state` sent with the authorization request; it names the pending sign-in.
    public var state: String
    /// The `nonce` sent with the authorization request.
    public var nonce: String
    /// The PKCE `code_verifier` whose S256 challenge was sent.
    public var codeVerifier: String
    /// The `redirect_uri` sent (the code exchange repeats it).
    public var redirectURI: URL
    /// The `max_age` requested, in seconds, if any.
    public var maximumAuthenticationAge: Int?
    /// What the application attached when it started the sign-in (for example where to return afterwards).
    public var context: [String: String]
    /// When it was started.
    public var createdAt: Date
    /// When it expires; a callback after that is refused with ``OpenIDConnectError/Code/stateUnknown``.
    public var expiresAt: Date
    /// The DPoP key whose thumbprint was sent as `dpop_jkt`, when the sign-in uses DPoP: the code is exchanged with a
    /// proof signed by it, and the session's credentials keep it. A secret.
    public var dpopKey: DPoPKey?

    /// Creates a pending sign-in.
    public init(
        state: String, nonce: String, codeVerifier: String, redirectURI: URL, maximumAuthenticationAge: Int? = nil,
        context: [String: String] = [:], createdAt: Date, expiresAt: Date, dpopKey: DPoPKey? = nil
    ) {
        self.state = state
        self.nonce = nonce
        self.codeVerifier = codeVerifier
        self.redirectURI = redirectURI
        self.maximumAuthenticationAge = maximumAuthenticationAge
        self.context = context
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.dpopKey = dpopKey
    }

    /// Whether it has expired at `date`.
    public func isExpired(at date: Date) -> Bool { expiresAt <= date }

    /// A description without the state, nonce or verifier.
    public var description: String {
        "PendingSignIn(state: <redacted>, redirectURI: \(redirectURI.absoluteString), expiresAt: \(expiresAt))"
    }

    /// A mirror without the state, nonce or verifier, for `dump` and `String(reflecting:)`.
    public var customMirror: Mirror {
        Mirror(self, children: ["description": description], displayStyle: .struct)
    }

    enum CodingKeys: String, CodingKey {
        case state, nonce
        case codeVerifier = "code_verifier"
        case redirectURI = "redirect_uri"
        case maximumAuthenticationAge = "max_age"
        case context
        case createdAt = "created_at"
        case expiresAt = "expires_at"
        case dpopKey = "dpop_key"
    }
}

/// Who signed in with which provider session: recorded when a sign-in completes, so that a back-channel logout
/// naming a `sid` or a `sub` finds the sessions to close.
public struct OpenIDSignInRecord: Sendable, Hashable, Codable {
    /// The session identifier the user was opened under.
    public var identifier: String
    /// The provider's issuer.
    public var issuer: String
    /// The ID token's `sub`.
    public var subject: String
    /// The ID token's `sid` (the provider's session), if it sent one.
    public var sessionID: String?
    /// When the record was made.
    public var signedInAt: Date

    /// Creates a record.
    public init(identifier: String, issuer: String, subject: String, sessionID: String?, signedInAt: Date) {
        self.identifier = identifier
        self.issuer = issuer
        self.subject = subject
        self.sessionID = sessionID
        self.signedInAt = signedInAt
    }

    /// Whether a logout for `subject` and/or `sessionID` at `issuer` concerns this record: the `sid` must match
    /// when one is given, and the `sub` when one is given.
    public func matches(issuer: String, subject: String?, sessionID: String?) -> Bool {
        guard self.issuer == issuer else { return false }
        if let sessionID, self.sessionID != sessionID { return false }
        if let subject, self.subject != subject { return false }
        return subject != nil || sessionID != nil
    }

    enum CodingKeys: String, CodingKey {
        case identifier, issuer
        case subject = "sub"
        case sessionID = "sid"
        case signedInAt = "signed_in_at"
    }
}
#endif
