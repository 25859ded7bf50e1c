#if OpenIDConnect
import Foundation
import UserSessions

extension OpenIDConnectClient {
    /// The endpoint authorization requests are pushed to (RFC 9126), or `nil` when they go through the browser: the
    /// provider requires pushing, or the configuration asks for it.
    ///
    /// - Throws: ``OpenIDConnectError/Code/invalidConfiguration`` when pushing is required or asked for and the
    ///   provider has no endpoint, or one that is neither HTTPS nor loopback HTTP.
    func pushedAuthorizationRequestEndpoint(in metadata: OpenIDProviderMetadata) throws(OpenIDConnectError) -> URL? {
        guard metadata.requiresPushedAuthorizationRequests || configuration.pushesAlways else {
            return nil
        }
        guard let endpoint = metadata.pushedAuthorizationRequestEndpoint else {
            throw OpenIDConnectError(
                .invalidConfiguration,
                metadata.requiresPushedAuthorizationRequests
                    ? "the provider requires pushed authorization requests but names no endpoint for them"
                    : "pushed authorization requests are asked for but the provider has no endpoint for them",
                failureClass: .misconfiguration)
        }
        try Self.checkSecure(endpoint, named: "the pushed authorization request endpoint")
        return endpoint
    }

    /// POSTs the authorization request `parameters` to `endpoint` with the client's authentication, under the rules
    /// of token requests (no redirects, the size limit, the request timeout), and returns the `request_uri`.
    ///
    /// - Throws: ``OpenIDConnectError/Code/pushedAuthorizationFailed``: transient when no answer came, for a
    ///   redirect, 408, 429, 5xx or an answer without a `request_uri` or a positive integer `expires_in`;
    ///   misconfiguration for the other refusals (`invalid_client`, `invalid_request`, 400, 401, …).
    func pushAuthorizationRequest(
        _ parameters: [(String, String)], to endpoint: URL, metadata: OpenIDProviderMetadata, secrets: [String]
    ) async throws(OpenIDConnectError) -> String {
        let secrets = secrets + [configuration.clientAuthentication.secret].compactMap { $0 }
        // Every method but HTTP Basic adds client_id to the form itself: it is sent once.
        let fields: [(String, String)]
        switch configuration.clientAuthentication {
        case .clientSecretBasic: fields = parameters
        default: fields = parameters.filter { $0.0 != "client_id" }
        }
        let body = try await postAuthenticated(
            fields, to: endpoint, named: "the pushed authorization request endpoint", metadata: metadata,
            secrets: secrets, failure: (.pushedAuthorizationFailed, "the pushed authorization request"))
        return try Self.requestURI(in: body)
    }

    /// The `request_uri` of a pushed authorization response (RFC 9126 §2.2), which must also carry a positive
    /// integer `expires_in`.
    static func requestURI(in body: Data) throws(OpenIDConnectError) -> String {
        let object: [String: Any]
        do {
            object = try JSONObject.parse(
                body, what: "the pushed authorization response", code: .pushedAuthorizationFailed)
        } catch {
            throw OpenIDConnectError(error.code, error.message, failureClass: .transient)
        }
        guard let requestURI = object["request_uri"] as? String, !requestURI.isEmpty else {
            throw OpenIDConnectError(
                .pushedAuthorizationFailed, "the pushed authorization response has no request_uri",
                failureClass: .transient)
        }
        let expiresIn = object["expires_in"]
        guard !(expiresIn is Bool), !(expiresIn is String), let number = expiresIn as? NSNumber,
            let seconds = Int(exactly: number.doubleValue), seconds > 0
        else {
            throw OpenIDConnectError(
                .pushedAuthorizationFailed, "the pushed authorization response has no positive integer expires_in",
                failureClass: .transient)
        }
        return requestURI
    }
}
#endif
