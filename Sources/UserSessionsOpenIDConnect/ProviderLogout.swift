#if OpenIDConnect
import Foundation

/// Where the browser goes after ``OpenIDConnectClient/signOut(identifier:registry:postLogoutRedirectURI:state:)``
/// signed the user out locally.
public enum ProviderLogout: Sendable, Equatable {
    /// Send the browser to this URL (the provider's `end_session_endpoint`) so the provider ends its session too.
    case redirect(URL)
    /// The provider has no `end_session_endpoint` (its discovery document names none): there is no provider
    /// session to end from here. Send the browser to the post-logout page.
    case notOffered
    /// The logout URL could not be made because the provider's metadata could not be read (an outage): the
    /// provider's session may still be alive. Send the browser to the post-logout page and log the error.
    case unavailable(OpenIDConnectError)

    /// The URL to send the browser to, if there is one.
    public var url: URL? {
        if case .redirect(let url) = self { return url }
        return nil
    }
}

/// The `state` of an RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0 §3): a random value the app sends
/// with the logout, keeps in the browser (a short-lived `HttpOnly` cookie), and compares when the provider sends the
/// browser back to the post-logout redirect URI, so that page knows the logout it shows is the one the user asked
/// for.
public enum PostLogoutState {
    /// A new state: 256 random bits as 43 base64url characters.
    public static func make() -> String { SignInSecrets.random() }

    /// Checks the `state` the provider returned against the one kept in the browser, in constant time.
    ///
    /// - Throws: ``OpenIDConnectError/Code/postLogoutStateMismatch`` when either is missing or empty, or they
    ///   differ.
    public static func check(returned: String?, expected: String?) throws(OpenIDConnectError) {
        guard let returned, let expected, !returned.isEmpty, !expected.isEmpty,
            SignInSecrets.constantTimeEqual(returned, expected)
        else {
            throw OpenIDConnectError(
                .postLogoutStateMismatch, "the post-logout redirect's state is missing or not the one sent")
        }
    }
}
#endif
