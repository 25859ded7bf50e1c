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
    /// sign-in record, and returns the URL to send the browser to so the provider ends its session too.
    ///
    /// - Returns: The logout URL, or `nil` when the provider has no `end_session_endpoint` (the local sign-out
    ///   happened all the same).
    /// - Throws: What `closeAndClear(identifier:)` throws (a `UserSessionError`).
    public func signOut(
        identifier: String, registry: UserSessionRegistry, postLogoutRedirectURI: URL? = nil, state: String? = nil
    ) async throws -> URL? {
        let idToken = try? await registry.store.load(identifier: identifier)?.credentials?.idToken
        try await registry.closeAndClear(identifier: identifier)
        try? await stateStore.forget(identifier: identifier, issuer: issuer)
        do {
            return try await logoutURL(
                idTokenHint: idToken, postLogoutRedirectURI: postLogoutRedirectURI, state: state)
        } catch {
            return nil
        }
    }
}
#endif
