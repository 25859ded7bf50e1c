#if Hummingbird || Vapor
import Foundation
import HTTPTypes
import UserSessions

/// Forwards the browser's API calls to one upstream API with the signed-in user's access token, so the browser
/// never holds a token.
///
/// Mount it with the adapter's `addProxy` (Hummingbird's `WebSessions.addProxy(_:at:to:)`, Vapor's
/// `WebSessions.addProxy(_:at:to:)` on a `RoutesBuilder`): `<mount>/<path>?<query>` is sent to `<upstream>/<path>?<query>`
/// with `Authorization: Bearer <the user's access token>` (or, for a session bound with DPoP, `Authorization: DPoP`
/// and a fresh proof), through `UserSessionController/withAuthorization`: after a 401 the token is refreshed (once
/// for every concurrent caller) and the call replayed once; a DPoP nonce challenge is answered once, without a
/// refresh.
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
        // A proof the browser made is not the session's: the proxy signs its own.
        "dpop",
    ]
    /// The answer's headers never passed back (lowercased).
    static let strippedResponseHeaders: Set<String> = [
        "set-cookie", "set-cookie2", "content-length", "connection", "keep-alive", "proxy-authenticate",
        "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "www-authenticate",
        // The upstream's nonce is the session's proof state, not the browser's business.
        "dpop-nonce",
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

    /// The methods the proxy forwards.
    package static let methods: [HTTPRequest.Method] = [.get, .head, .post, .put, .patch, .delete]

    /// `path` without trailing slashes: the mount point of a proxy mounted at `path`.
    package static func mountPoint(_ path: String) -> String {
        var trimmed = path
        while trimmed.hasSuffix("/") { trimmed.removeLast() }
        return trimmed
    }

    /// Forwards `request`, which reached the proxy mounted at `mount`, as the user of `session`.
    package func forward(_ request: WebRequest, mount: String, session: WebSession, csrfHeader: String)
        async throws -> WebResponse
    {
        let subpath = request.path.hasPrefix(mount) ? String(request.path.dropFirst(mount.utf8.count)) : request.path
        return try await forward(request, subpath: subpath, session: session, csrfHeader: csrfHeader)
    }

    /// Forwards `request` (whose path below the mount point is `subpath`) as the user of `session`, in a span when
    /// the session is traced (``traced(_:subpath:session:_:)``).
    func forward(_ request: WebRequest, subpath: String, session: WebSession, csrfHeader: String) async throws
        -> WebResponse
    {
        try await traced(request, subpath: subpath, session: session) { request in
            try await forwardUntraced(request, subpath: subpath, session: session, csrfHeader: csrfHeader)
        }
    }

    private func forwardUntraced(_ request: WebRequest, subpath: String, session: WebSession, csrfHeader: String)
        async throws -> WebResponse
    {
        guard let url = url(forSubpath: subpath, query: request.query) else {
            return .json(["error": "invalid_path"], status: .badRequest)
        }
        guard let body = await request.body(upTo: configuration.maximumRequestBytes) else {
            return .json(["error": "request_too_large"], status: .contentTooLarge)
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
        let data = body.isEmpty ? nil : Data(body)
        let answer: HTTPTransportResponse
        do {
            answer = try await session.controller.withAuthorization(method: method.rawValue, url: url) {
                authorization in
                var headers = headers
                for field in authorization { headers.add(name: field.name, value: field.value) }
                return try await client.send(
                    method, url, headers: headers, body: data, timeout: configuration.timeout,
                    maximumResponseBytes: configuration.maximumResponseBytes)
            }
        } catch let failure as HTTPExchangeFailure {
            switch failure.kind {
            case .timedOut: return .json(["error": "upstream_timeout"], status: .gatewayTimeout)
            case .cancelled: throw CancellationError()
            case .responseTooLarge, .redirected, .failed:
                return .json(["error": "bad_gateway"], status: .badGateway)
            }
        }
        return Self.response(answer)
    }

    /// The browser's response for the upstream's `answer`, without the headers it must not see.
    static func response(_ answer: HTTPTransportResponse) -> WebResponse {
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
        return WebResponse(
            status: HTTPResponse.Status(code: answer.statusCode), headers: fields, body: Array(answer.body))
    }
}

#endif
