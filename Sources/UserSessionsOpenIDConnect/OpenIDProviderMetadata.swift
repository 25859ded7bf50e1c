#if OpenIDConnect
import Foundation
import UserSessions

/// What the client needs to know about an OpenID Connect provider (or a plain OAuth 2.0 server): its issuer and
/// endpoints.
///
/// Read from the provider's discovery document (`/.well-known/openid-configuration`) by
/// ``OpenIDConnectClient/init(issuer:configuration:stateStore:transport:clock:)``, or written by hand for a server
/// without discovery (``OpenIDConnectClient/init(provider:configuration:stateStore:transport:clock:)``).
public struct OpenIDProviderMetadata: Sendable, Hashable {
    /// The issuer identifier; the `iss` of every token must equal it, byte for byte.
    public var issuer: String
    /// Where the browser is sent to sign in.
    public var authorizationEndpoint: URL
    /// Where the code is exchanged for tokens.
    public var tokenEndpoint: URL
    /// The provider's public keys (JWKS). Required to validate ID tokens.
    public var jwksURI: URL?
    /// The userinfo endpoint, if any.
    public var userInfoEndpoint: URL?
    /// The RP-initiated logout endpoint (`end_session_endpoint`), if any.
    public var endSessionEndpoint: URL?
    /// The RFC 7009 revocation endpoint, if any.
    public var revocationEndpoint: URL?
    /// Whether the provider sends `iss` with every authorization response (RFC 9207). When it does, a callback
    /// without `iss` is refused too.
    public var authorizationResponseIssuerParameterSupported: Bool
    /// The pushed authorization request endpoint (`pushed_authorization_request_endpoint`, RFC 9126), if any.
    public var pushedAuthorizationRequestEndpoint: URL?
    /// Whether the provider accepts authorization requests only through ``pushedAuthorizationRequestEndpoint``
    /// (`require_pushed_authorization_requests`). When it does, every sign-in is pushed.
    public var requiresPushedAuthorizationRequests: Bool
    /// The PKCE methods the provider names (`code_challenge_methods_supported`), or `nil` when it names none.
    public var codeChallengeMethodsSupported: [String]?
    /// The DPoP proof algorithms the provider accepts (`dpop_signing_alg_values_supported`, RFC 9449 §5.1), or `nil`
    /// when it names none.
    public var dpopSigningAlgorithmsSupported: [String]?

    /// Creates provider metadata by hand.
    public init(
        issuer: String, authorizationEndpoint: URL, tokenEndpoint: URL, jwksURI: URL? = nil,
        userInfoEndpoint: URL? = nil, endSessionEndpoint: URL? = nil, revocationEndpoint: URL? = nil,
        authorizationResponseIssuerParameterSupported: Bool = false, pushedAuthorizationRequestEndpoint: URL? = nil,
        requiresPushedAuthorizationRequests: Bool = false, codeChallengeMethodsSupported: [String]? = nil,
        dpopSigningAlgorithmsSupported: [String]? = nil
    ) {
        self.issuer = issuer
        self.authorizationEndpoint = authorizationEndpoint
        self.tokenEndpoint = tokenEndpoint
        self.jwksURI = jwksURI
        self.userInfoEndpoint = userInfoEndpoint
        self.endSessionEndpoint = endSessionEndpoint
        self.revocationEndpoint = revocationEndpoint
        self.authorizationResponseIssuerParameterSupported = authorizationResponseIssuerParameterSupported
        self.pushedAuthorizationRequestEndpoint = pushedAuthorizationRequestEndpoint
        self.requiresPushedAuthorizationRequests = requiresPushedAuthorizationRequests
        self.codeChallengeMethodsSupported = codeChallengeMethodsSupported
        self.dpopSigningAlgorithmsSupported = dpopSigningAlgorithmsSupported
    }

    /// The metadata in a discovery document `body`, which must name `expectedIssuer` exactly.
    ///
    /// - Throws: ``OpenIDConnectError/Code/discoveryFailed`` for a body that is not a discovery document,
    ///   ``OpenIDConnectError/Code/discoveryIssuerMismatch`` when its `issuer` differs.
    static func parse(_ body: Data, expectedIssuer: String) throws(OpenIDConnectError) -> OpenIDProviderMetadata {
        let document = try JSONObject.parse(body, what: "the discovery document", code: .discoveryFailed)
        func url(_ name: String, required: Bool) throws(OpenIDConnectError) -> URL? {
            guard let value = document[name] else {
                if required {
                    throw OpenIDConnectError(.discoveryFailed, "the discovery document has no \(name)")
                }
                return nil
            }
            guard let string = value as? String, let url = URL(string: string), url.scheme != nil else {
                throw OpenIDConnectError(.discoveryFailed, "the discovery document's \(name) is not a URL")
            }
            return url
        }
        guard let issuer = document["issuer"] as? String else {
            throw OpenIDConnectError(.discoveryFailed, "the discovery document has no issuer")
        }
        guard issuer.utf8.elementsEqual(expectedIssuer.utf8) else {
            throw OpenIDConnectError(
                .discoveryIssuerMismatch,
                "the discovery document names the issuer \(issuer), not \(expectedIssuer)")
        }
        guard let authorization = try url("authorization_endpoint", required: true),
            let token = try url("token_endpoint", required: true)
        else { throw OpenIDConnectError(.discoveryFailed, "the discovery document lacks an endpoint") }
        return OpenIDProviderMetadata(
            issuer: issuer, authorizationEndpoint: authorization, tokenEndpoint: token,
            jwksURI: try url("jwks_uri", required: true),
            userInfoEndpoint: try url("userinfo_endpoint", required: false),
            endSessionEndpoint: try url("end_session_endpoint", required: false),
            revocationEndpoint: try url("revocation_endpoint", required: false),
            authorizationResponseIssuerParameterSupported: document["authorization_response_iss_parameter_supported"]
                as? Bool ?? false,
            pushedAuthorizationRequestEndpoint: try url("pushed_authorization_request_endpoint", required: false),
            requiresPushedAuthorizationRequests: document["require_pushed_authorization_requests"] as? Bool ?? false,
            codeChallengeMethodsSupported: try strings("code_challenge_methods_supported"),
            dpopSigningAlgorithmsSupported: try strings("dpop_signing_alg_values_supported"))

        func strings(_ name: String) throws(OpenIDConnectError) -> [String]? {
            guard let value = document[name] else { return nil }
            guard let strings = value as? [String] else {
                throw OpenIDConnectError(.discoveryFailed, "the discovery document's \(name) is not a list of strings")
            }
            return strings
        }
    }
}

/// Reading a JSON object out of a response body, through the core's strict reader (`StrictJSON`: duplicate
/// members, nesting deeper than 128 levels and anything that is not JSON are refused before a decoder runs).
enum JSONObject {
    /// The members of the JSON object in `body`.
    static func parse(_ body: Data, what: String, code: OpenIDConnectError.Code) throws(OpenIDConnectError)
        -> [String: Any]
    {
        let object: [String: Any]?
        do {
            object = try StrictJSON.foundationObject(body)
        } catch .refused(let refusal) {
            throw OpenIDConnectError(code, "\(what) is refused: \(refusal)")
        } catch {
            throw OpenIDConnectError(code, "\(what) is not JSON")
        }
        guard let object else { throw OpenIDConnectError(code, "\(what) is not a JSON object") }
        return object
    }

    /// `Value` decoded from `body` after the same strict scan.
    static func decode<Value: Decodable>(
        _ type: Value.Type, from body: Data, what: String, code: OpenIDConnectError.Code,
        failureClass: RefreshFailureClass? = nil
    ) throws(OpenIDConnectError) -> Value {
        do {
            return try StrictJSON.decode(type, from: body)
        } catch .refused(let refusal) {
            throw OpenIDConnectError(code, "\(what) is refused: \(refusal)", failureClass: failureClass)
        } catch {
            throw OpenIDConnectError(code, "\(what) is not a JSON object", failureClass: failureClass)
        }
    }
}
#endif
