#if OpenIDConnect
import UserSessions

/// The one error type of sign-in and sign-out with OpenID Connect.
///
/// Errors compare by ``code`` only. Descriptions name what failed and never hold a token, a code, a client secret,
/// a `state`, a `nonce` or a PKCE verifier. Failures that come from talking to the provider carry the
/// ``failureClass`` the refresher uses: a timeout or a 5xx is `RefreshFailureClass/transient` (try again later),
/// a refused code is `RefreshFailureClass/terminal`, a refused client is
/// `RefreshFailureClass/misconfiguration`. Every validation failure is a refusal: nothing was opened and nothing
/// was signed out.
public struct OpenIDConnectError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, as an extensible enum-like struct.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The code's name, such as `nonceMismatch`.
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }

        /// The provider's discovery document could not be fetched or read (transient when the fetch failed).
        public static let discoveryFailed = Code("discoveryFailed")
        /// The discovery document's `issuer` is not, byte for byte, the issuer configured.
        public static let discoveryIssuerMismatch = Code("discoveryIssuerMismatch")
        /// The provider's JWKS could not be fetched or read.
        public static let keySetFetchFailed = Code("keySetFetchFailed")
        /// A setting cannot work (for example a lifetime that is not positive); the message names it.
        public static let invalidConfiguration = Code("invalidConfiguration")
        /// The callback carried an `error` parameter; ``OpenIDConnectError/providerErrorCode`` holds it
        /// (for example `access_denied`).
        public static let authorizationDenied = Code("authorizationDenied")
        /// The callback's query is not one: no `state`, no `code`, or a parameter given twice.
        public static let malformedCallback = Code("malformedCallback")
        /// The `state` was never issued, has already been used, or the pending sign-in has expired.
        public static let stateUnknown = Code("stateUnknown")
        /// The callback came without the sealed pending sign-in of the browser that started it (no cookie): the
        /// callback URL was opened in another browser (login CSRF), the browser refuses cookies, or it expired.
        public static let pendingSignInMissing = Code("pendingSignInMissing")
        /// The sealed pending sign-in does not open: sealed with a key this client no longer has (a restart with
        /// ``PendingSignInKeys/random()``, or an instance of the fleet with other keys), for another client, or
        /// altered.
        public static let pendingSignInUnreadable = Code("pendingSignInUnreadable")
        /// The callback's `state` is not the one of the browser's pending sign-in: the callback belongs to a
        /// sign-in started elsewhere (login CSRF) or to an earlier sign-in of this browser.
        public static let stateMismatch = Code("stateMismatch")
        /// The callback's `iss` parameter (RFC 9207) is not the provider's issuer: a mix-up attack.
        public static let callbackIssuerMismatch = Code("callbackIssuerMismatch")
        /// Too many sign-ins are pending in a state store. The package's stores no longer report it: a full store
        /// drops its oldest pending sign-in instead (``PendingSignInStorage/stateStore``). Kept for custom stores.
        public static let tooManyPendingSignIns = Code("tooManyPendingSignIns")
        /// The token endpoint refused the code or the client, or could not be reached; see
        /// ``OpenIDConnectError/failureClass``.
        public static let tokenExchangeFailed = Code("tokenExchangeFailed")
        /// The sign-in asked for DPoP-bound tokens (``OpenIDConnectConfiguration/dpop``) and the token endpoint
        /// answered a `token_type` other than `DPoP`: a downgrade to bearer tokens (RFC 9449 §5), refused.
        public static let dpopDowngraded = Code("dpopDowngraded")
        /// The pushed authorization request endpoint (RFC 9126) refused the request or the client, could not be
        /// reached, or answered without a usable `request_uri` and `expires_in`; see
        /// ``OpenIDConnectError/failureClass``.
        public static let pushedAuthorizationFailed = Code("pushedAuthorizationFailed")
        /// The token response has no `id_token`.
        public static let missingIDToken = Code("missingIDToken")
        /// A token is not a signed JWT (three base64url parts, a JSON header and claims).
        public static let malformedToken = Code("malformedToken")
        /// The token's `alg` is not in the allow-list (`none` and every HMAC always are refused).
        public static let algorithmRefused = Code("algorithmRefused")
        /// No key of the JWKS has the token's `kid`, even after a refetch; transient when the refetch was not
        /// allowed yet (``OpenIDConnectConfiguration/keySetRefetchInterval``).
        public static let keyUnknown = Code("keyUnknown")
        /// The signature does not verify with the key.
        public static let signatureInvalid = Code("signatureInvalid")
        /// The token's `iss` is not the provider's issuer.
        public static let issuerMismatch = Code("issuerMismatch")
        /// The token's `aud` does not contain the client id, or its `azp` is missing or another client.
        public static let audienceMismatch = Code("audienceMismatch")
        /// The token's `exp` has passed (beyond the allowed clock skew).
        public static let tokenExpired = Code("tokenExpired")
        /// The token's `iat` is later than now plus the allowed clock skew, or too old for a logout token.
        public static let issuedAtInvalid = Code("issuedAtInvalid")
        /// The ID token's `nonce` is missing or not the one of the sign-in.
        public static let nonceMismatch = Code("nonceMismatch")
        /// The ID token's `at_hash` does not match the access token.
        public static let accessTokenHashMismatch = Code("accessTokenHashMismatch")
        /// A required claim is missing or has the wrong type; the message names it.
        public static let missingClaim = Code("missingClaim")
        /// `max_age` was requested and the `auth_time` is missing or too old.
        public static let authenticationTooOld = Code("authenticationTooOld")
        /// The userinfo endpoint failed, or its `sub` is not the ID token's.
        public static let userInfoFailed = Code("userInfoFailed")
        /// The logout token is not a back-channel logout token: no logout event, a `nonce`, or neither `sub`
        /// nor `sid`.
        public static let invalidLogoutToken = Code("invalidLogoutToken")
        /// The logout token's `jti` was seen before within its lifetime.
        public static let logoutTokenReplayed = Code("logoutTokenReplayed")
        /// No session was signed in with the logout token's `sid` or `sub`.
        public static let unknownSession = Code("unknownSession")
        /// The pending-sign-in store failed to read or write.
        public static let storeFailure = Code("storeFailure")
        /// The provider has no `end_session_endpoint`.
        public static let noEndSessionEndpoint = Code("noEndSessionEndpoint")
        /// The ID token of a refresh response names another user (`sub`) than the session's ID token.
        public static let subjectChanged = Code("subjectChanged")
        /// Signing a session out locally failed (`closeAndClear`); ``OpenIDConnectError/underlying`` holds the
        /// registry's error.
        public static let signOutFailed = Code("signOutFailed")
        /// The state of a post-logout redirect is missing or not the one sent (``PostLogoutState``).
        public static let postLogoutStateMismatch = Code("postLogoutStateMismatch")

        public var description: String { rawValue }
    }

    /// What went wrong.
    public var code: Code
    /// What happened, without secrets.
    public var message: String
    /// How a failure to talk to the provider should be handled, as for refreshes; `nil` for refusals.
    public var failureClass: RefreshFailureClass?
    /// The OAuth error code the provider sent (the callback's `error`, or the token endpoint's), if any.
    public var providerErrorCode: String?
    /// The error underneath, if any (never one holding a secret).
    public var underlying: (any Error)?

    /// Creates an error.
    public init(
        _ code: Code, _ message: String, failureClass: RefreshFailureClass? = nil, providerErrorCode: String? = nil,
        underlying: (any Error)? = nil
    ) {
        self.code = code
        self.message = message
        self.failureClass = failureClass
        self.providerErrorCode = providerErrorCode
        self.underlying = underlying
    }

    /// `OpenIDConnectError(code): message`, with the failure class when there is one.
    public var description: String {
        var text = "OpenIDConnectError(\(code)): \(message)"
        if let failureClass { text += " [\(failureClass)]" }
        return text
    }

    /// Errors are equal when their codes are.
    public static func == (lhs: OpenIDConnectError, rhs: OpenIDConnectError) -> Bool { lhs.code == rhs.code }
}
#endif
