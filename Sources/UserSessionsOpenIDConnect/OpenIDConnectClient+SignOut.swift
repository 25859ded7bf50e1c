#if OpenIDConnect
import Foundation
import UserSessions

extension OpenIDConnectClient {
    /// The RP-initiated logout URL (OpenID Connect RP-Initiated Logout 1.0): the provider's `end_session_endpoint`
    /// with `id_token_hint`, `client_id`, and `post_logout_redirect_uri` and `state` when given.
    ///
    /// - Throws: ``OpenIDConnectError/Code/noEndSessionEndpoint`` when the provider has none; the errors of
    ///   ``providerMetadata()``.
    public func logoutURL(idTokenHint: String?, postLogoutRedirectURI: URL? = nil, state: String? = nil)
        async throws(OpenIDConnectError) -> URL
    {
        guard let endpoint = try await providerMetadata().endSessionEndpoint else {
            throw OpenIDConnectError(.noEndSessionEndpoint, "the provider has no end_session_endpoint")
        }
        var parameters: [(String, String)] = []
        if let idTokenHint { parameters.append(("id_token_hint", idTokenHint)) }
        parameters.append(("client_id", configuration.clientID))
        if let postLogoutRedirectURI {
            parameters.append(("post_logout_redirect_uri", postLogoutRedirectURI.absoluteString))
        }
        if let state { parameters.append(("state", state)) }
        return try Self.url(endpoint, adding: parameters)
    }

    /// Signs `identifier` out: reads its ID token from the registry's store, closes and clears the session
    /// (`registry.closeAndClear(identifier:)`, which revokes at the provider when configured to), forgets its
    /// sign-in record, and says where to send the browser so the provider ends its session too.
    ///
    /// - Parameters:
    ///   - identifier: The session to sign out.
    ///   - registry: The registry it is open or stored in.
    ///   - postLogoutRedirectURI: Where the provider sends the browser back (registered with the provider).
    ///   - state: Sent along and returned on the post-logout redirect; make one with ``PostLogoutState/make()``,
    ///     keep it in the browser, and check it with ``PostLogoutState/check(returned:expected:)``.
    /// - Returns: The provider's logout: ``ProviderLogout/redirect(_:)``, ``ProviderLogout/notOffered`` when the
    ///   provider has no `end_session_endpoint`, or ``ProviderLogout/unavailable(_:)`` when the URL could not be made
    ///   (the discovery document could not be fetched). In every case the local sign-out happened.
    /// - Throws: ``OpenIDConnectError/Code/signOutFailed`` when `closeAndClear` failed (its `UserSessionError` as
    ///   ``OpenIDConnectError/underlying``, its failure class kept); the session may still be stored.
    public func signOut(
        identifier: String, registry: UserSessionRegistry, postLogoutRedirectURI: URL? = nil, state: String? = nil
    ) async throws(OpenIDConnectError) -> ProviderLogout {
        let idToken = try? await registry.store.load(identifier: identifier)?.credentials?.idToken
        do {
            try await registry.closeAndClear(identifier: identifier)
        } catch {
            throw OpenIDConnectError(
                .signOutFailed, "closing and clearing the session failed (\(type(of: error)))",
                failureClass: (error as? UserSessionError)?.failureClass ?? .transient, underlying: error)
        }
        try? await stateStore.forget(identifier: identifier, issuer: issuer)
        do throws(OpenIDConnectError) {
            return .redirect(
                try await logoutURL(idTokenHint: idToken, postLogoutRedirectURI: postLogoutRedirectURI, state: state))
        } catch  where error.code == .noEndSessionEndpoint {
            return .notOffered
        } catch {
            return .unavailable(error)
        }
    }
}
#endif
