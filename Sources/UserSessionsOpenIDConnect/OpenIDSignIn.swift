#if OpenIDConnect
import Foundation
import UserSessions

/// A completed, validated sign-in.
public struct OpenIDSignIn: Sendable, CustomStringConvertible {
    /// Opens the session: `registry.open(signIn.prototype)` or `controller.open(signIn.prototype)`. Its credentials
    /// hold the access token, the refresh token if any, and the ID token (`Credentials/idToken`).
    public var prototype: UserSessionPrototype
    /// The ID token's validated claims.
    public var claims: OpenIDClaims
    /// The userinfo endpoint's claims, when ``OpenIDConnectConfiguration/readsUserInfo`` is on.
    public var userInfoClaims: OpenIDClaims?
    /// The ``AuthorizationOptions/context`` given when the sign-in started.
    public var context: [String: String]

    /// The identifier and the claim names; no token.
    public var description: String {
        "OpenIDSignIn(identifier: \(prototype.identifier), claims: \(claims.values.keys.sorted()))"
    }
}
#endif
