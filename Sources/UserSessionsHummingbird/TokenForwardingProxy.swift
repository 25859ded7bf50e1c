#if Hummingbird
import Foundation
import HTTPTypes
import Hummingbird
import UserSessions

/// Forwards the browser's API calls to one upstream API with the signed-in user's access token, so the browser
/// never holds a token.
///
/// Mount it with ``WebSessions/addProxy(_:at:to:)``: `<mount>/<path>?<query>` is sent to `<upstream>/<path>?<query>`
/// with `Authorization: Bearer <the user's access token>`, through `UserSessionController/withAccessToken`: after a
/// 401 the token is refreshed (once for every concurrent caller) and the call replayed once.
///
/// - The upstream is an allow-listed base URL (HTTPS, or HTTP on loopback): a path that would leave it (`..`, an
///   encoded slash or backslash) is refused with 400.
/// - The browser's `Cookie`, `Authorization`, CSRF header, `Host` and hop-by-hop headers (`Connection` and the
///   headers it names, `Keep-Alive`, `Proxy-*`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`) are never
///   forwarded; `Set-Cookie` and hop-by-hop headers of the answer are dropped.
/// - Request bodies over ``Configuration/maximumRequestBytes`` are refused with 413, answers over
///   ``Configuration/maximumResponseBytes`` become a 502, and a call that takes longer than
///   ``Configuration/timeout`` a 504. Redirects are not followed (502).
public struct TokenForwardingProxy: Sendable {
    /// The proxy's limits.
    public struct Configuration: Sendable {
        /// The largest request body forwarded. Default 1 MiB.
        public var maximumRequestBytes: Int
        /// The largest answer read from the upstream. Default 1 MiB.
        public var maximumResponseBytes: Int
        /// How long one call to the upstream may take (each of the two when replayed). Default 30 s.
        public var timeout: Duration

        /// Creates limits with the defaults described on each property.
        public init(
            maximumRequestBytes: Int = 1 << 20, maximumResponseBytes: Int = 1 << 20, timeout: Duration = .seconds(30)
        ) {
            self.maximumRequestBytes = maximumRequestBytes
            self.maximumResponseBytes = maximumResponseBytes
            self.timeout = timeout
        }
    }

    /// The upstream's base URL; every forwarded URL is under it.
    public let upstream: URL
    /// The limits.
    public let configuration: Configuration
    let client: GuardedHTTPClient

    /// A proxy to `upstream`.
    ///
    /// - Parameters:
    ///   - upstream: The base URL of the API, such as `https://api.example.com/v1` (HTTPS, or HTTP on loopback).
    ///   - configuration: The limits.
    ///   - transport: The HTTP transport; default a `URLSessionHTTPTransport` (which follows no redirect and keeps
    ///     no cookie).
    /// - Throws: ``WebSessionError/Code/invalidConfiguration`` for an upstream that is neither HTTPS nor loopback
    ///   HTTP, has a query or a fragment, or limits that are not positive.
    public init(
        upstream: URL, configuration: Configuration = Configuration(), transport: (any HTTPTransport)? = nil
    ) throws(WebSessionError) {
        do {
            try SecureEndpoint.check(upstream, describedAs: "the upstream")
        } catch {
            throw WebSessionError(.invalidConfiguration, "the upstream must be HTTPS, or plain HTTP on loopback")
        }
        guard upstream.query == nil, upstream.fragment == nil else {
            throw WebSessionError(.invalidConfiguration, "the upstream has a query or a fragment")
        }
        guard configuration.maximumRequestBytes > 0, configuration.maximumResponseBytes > 0,
            configuration.timeout > .zero
        else {
            throw WebSessionError(.invalidConfiguration, "the proxy's limits must be positive")
        }
        var base = upstream.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        self.upstream = URL(string: base) ?? upstream
        self.configuration = configuration
        client = GuardedHTTPClient(transport: transport, endpointName: "the upstream")
    }

    /// The request headers never forwarded (lowercased).
    static let strippedRequestHeaders: Set<String> = [
        "cookie", "authorization", "host", "content-length", "connection", "keep-alive", "proxy-authorization",
        "proxy-authenticate", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "origin",
        "forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto",
    ]
    /// The answer's headers never passed back (lowercased).
    static let strippedResponseHeaders: Set<String> = [
        "set-cookie", "set-cookie2", "content-length", "connection", "keep-alive", "proxy-authenticate",
        "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "www-authenticate",
    ]

    /// The upstream URL of `subpath` (the part of the request's path after the mount point, with its query), or
    /// `nil` when it would leave the upstream.
    func url(forSubpath subpath: String, query: String?) -> URL? {
        let lowered = subpath.lowercased()
        guard !lowered.contains("%2f"), !lowered.contains("%5c"), !lowered.contains("%2e"), !subpath.contains("\\"),
            subpath.isEmpty || subpath.hasPrefix("/"),
            !subpath.split(separator: "/", omittingEmptySubsequences: false).contains(where: { $0 == ".." || $0 == "." }
            )
        else { return nil }
        guard let url = URL(string: upstream.absoluteString + subpath + (query.map { "?" + $0 } ?? "")),
            url.scheme == upstream.scheme, url.host == upstream.host, url.port == upstream.port,
            url.path.hasPrefix(upstream.path)
        else { return nil }
        return url
    }

    /// Forwards `request` (whose path below the mount point is `subpath`) as the user of `session`.
    func forward(_ request: Request, subpath: String, session: WebSession, csrfHeader: String) async throws
        -> Response
    {
        try await traced(request, subpath: subpath, session: session) { request in
            try await forwardUntraced(request, subpath: subpath, session: session, csrfHeader: csrfHeader)
        }
    }

    private func forwardUntraced(_ request: Request, subpath: String, session: WebSession, csrfHeader: String)
        async throws -> Response
    {
        guard let url = url(forSubpath: subpath, query: request.uri.query) else {
            return WebSessions.json(["error": "invalid_path"], status: .badRequest)
        }
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: configuration.maximumRequestBytes)
        } catch {
            return WebSessions.json(["error": "request_too_large"], status: .contentTooLarge)
        }
        let connectionNamed = Set(
            request.headers[values: .connection].flatMap { $0.split(separator: ",") }
                .map { $0.trimmingCharacters(in: .whitespaces).lowercased() })
        var headers = HTTPTransportHeaders()
        for field in request.headers {
            let name = field.name.canonicalName
            if Self.strippedRequestHeaders.contains(name) || connectionNamed.contains(name)
                || name == csrfHeader.lowercased() || name.hasPrefix("proxy-")
            {
                continue
            }
            headers.add(name: field.name.rawName, value: field.value)
        }
        let method = HTTPTransportRequest.Method(rawValue: request.method.rawValue)
        let data = body.readableBytes > 0 ? Data(body.readableBytesView) : nil
        let answer: HTTPTransportResponse
        do {
            answer = try await session.controller.withAccessToken(
                isAuthenticationFailure: { $0 is UpstreamRefusedToken }
            ) { token in
                var headers = headers
                headers.add(name: "Authorization", value: "Bearer " + token)
                let answer = try await client.send(
                    method, url, headers: headers, body: data, timeout: configuration.timeout,
                    maximumResponseBytes: configuration.maximumResponseBytes)
                if answer.statusCode == 401 { throw UpstreamRefusedToken(response: answer) }
                return answer
            }
        } catch let refused as UpstreamRefusedToken {
            answer = refused.response
        } catch let failure as HTTPExchangeFailure {
            switch failure.kind {
            case .timedOut: return WebSessions.json(["error": "upstream_timeout"], status: .gatewayTimeout)
            case .cancelled: throw CancellationError()
            case .responseTooLarge, .redirected, .failed:
                return WebSessions.json(["error": "bad_gateway"], status: .badGateway)
            }
        }
        return Self.response(answer)
    }

    /// The browser's response for the upstream's `answer`, without the headers it must not see.
    static func response(_ answer: HTTPTransportResponse) -> Response {
        let connectionNamed = Set(
            answer.headers.values(for: "Connection").flatMap { $0.split(separator: ",") }
                .map { $0.trimmingCharacters(in: .whitespaces).lowercased() })
        var fields = HTTPFields()
        for field in answer.headers {
            let name = field.name.lowercased()
            guard !strippedResponseHeaders.contains(name), !connectionNamed.contains(name),
                !name.hasPrefix("proxy-"), let fieldName = HTTPField.Name(field.name)
            else { continue }
            fields.append(HTTPField(name: fieldName, value: field.value))
        }
        fields[.cacheControl] = fields[.cacheControl] ?? "no-store"
        return Response(
            status: HTTPResponse.Status(code: answer.statusCode), headers: fields,
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: answer.body)))
    }
}

/// The upstream answered 401: `withAccessToken` refreshes and replays once; a second one is passed on.
struct UpstreamRefusedToken: Error {
    let response: HTTPTransportResponse
}

extension WebSessions {
    /// Mounts `proxy` at `path` (such as `/upstream`) on `router`: every method of `<path>/**` is forwarded as the
    /// signed-in user.
    ///
    /// The routes are behind a ``CrossSiteRequestMiddleware`` that requires the CSRF header (403 JSON without it)
    /// and a ``WebSessionMiddleware`` with ``WebSessionMiddleware/Requirement/api`` (401 JSON without a session;
    /// 503 and the session kept when a refresh fails for a passing reason; signed out when it fails for good).
    public func addProxy<Context: WebSessionRequestContext>(
        _ proxy: TokenForwardingProxy, at path: String, to router: Router<Context>
    ) {
        var trimmed = path
        while trimmed.hasSuffix("/") { trimmed.removeLast() }
        let mount = trimmed
        let group = router.group(RouterPath(mount))
            .add(middleware: crossSiteRequestMiddleware(requiringHeader: true) as CrossSiteRequestMiddleware<Context>)
            .add(middleware: middleware(.api) as WebSessionMiddleware<Context>)
        let csrfHeader = configuration.csrfHeaderName
        let handler: @Sendable (Request, Context) async throws -> Response = { request, context in
            let session = try context.requireIdentity()
            let requestPath = request.uri.path
            let subpath = requestPath.hasPrefix(mount) ? String(requestPath.dropFirst(mount.utf8.count)) : requestPath
            return try await proxy.forward(request, subpath: subpath, session: session, csrfHeader: csrfHeader)
        }
        for method in [HTTPRequest.Method.get, .head, .post, .put, .patch, .delete] {
            group.on("**", method: method, use: handler)
        }
    }
}
#endif
