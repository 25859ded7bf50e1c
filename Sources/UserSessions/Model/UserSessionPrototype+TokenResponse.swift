import Foundation

extension UserSessionPrototype {
    /// Creates a prototype from a standard OAuth 2.0 token response (RFC 6749 §5.1), such as the body your
    /// authorization-code or device-code exchange received, for a user you already know.
    ///
    /// The body is read by the same strict parser as ``OAuth2TokenRefresher``'s responses:
    /// - `access_token`: a non-empty string (required);
    /// - `token_type`: an optional string (default `Bearer`);
    /// - `refresh_token`: an optional non-empty string;
    /// - `expires_in`: optional seconds, a number or a numeric string, not negative (clamped to 100 years);
    ///   ``Credentials/expiresAt`` is `receivedAt + expires_in`, and `nil` without it;
    /// - `scope`: optional, space-separated; it becomes ``Credentials/grantedPermissions``.
    /// A JSON `null` counts as absent. The credentials' ``Credentials/lastRefreshedAt`` is `receivedAt` and their
    /// source ``Credentials/Source/signIn``.
    ///
    /// - Parameters:
    ///   - identifier: The session identifier; `nil` (the default) uses `userInfo.id`.
    ///   - userInfo: The user (a token response does not say who the user is).
    ///   - tokenResponse: The response body.
    ///   - receivedAt: When the response was received (better: when its request was sent); expiry counts from here.
    /// - Throws: ``UserSessionError`` with code ``UserSessionError/Code/malformedTokenResponse`` when the body is not
    ///   a JSON object with those fields, is an error response (RFC 6749 §5.2), has duplicate members or is nested
    ///   more than 128 levels deep. Messages never contain field values.
    public init(
        identifier: String? = nil, userInfo: UserInfo, tokenResponse: Data, receivedAt: Date = Date()
    ) throws {
        let credentials = try OAuth2TokenResponse.parseSuccess(
            tokenResponse, previous: nil, sentAt: receivedAt, source: .signIn)
        self.init(identifier: identifier, userInfo: userInfo, credentials: credentials)
    }
}
