#if AsyncHTTPClient
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import UserSessions

/// An ``UserSessions/HTTPTransport`` over AsyncHTTPClient, for servers that already run one `HTTPClient`.
///
/// Pass it to ``UserSessions/OAuth2TokenRefresher`` and ``UserSessions/RemoteTokenStore`` (`transport:`); they keep
/// their HTTPS-or-loopback rule, the 1 MiB body limit, redirect refusal, deadlines and the RFC 6749 §5.2
/// classification whichever transport they use. The transport itself:
/// - never follows a redirect: a 3xx comes back as the response, which the package refuses;
/// - reads at most ``UserSessions/HTTPTransportRequest/maximumResponseBytes`` of a body (`collect(upTo:)`: an
///   announced longer body is refused before it is read, a longer stream as soon as it passes the limit) and throws
///   ``UserSessions/HTTPTransportError/Code/responseTooLarge``;
/// - ends the exchange, body included, after ``UserSessions/HTTPTransportRequest/timeout`` and throws
///   ``UserSessions/HTTPTransportError/Code/timedOut``;
/// - cancels the request when the calling task is cancelled and throws `CancellationError`.
///
/// ```swift
/// let client = HTTPClient(
///     eventLoopGroup: HTTPClient.defaultEventLoopGroup,
///     configuration: AsyncHTTPClientTransport.recommendedConfiguration)
/// let refresher = try OAuth2TokenRefresher(
///     tokenEndpoint: tokenURL, clientAuthentication: authentication,
///     transport: AsyncHTTPClientTransport(client: client))
/// // … serve requests …
/// try await client.shutdown()  // yours to do, after the last refresh
/// ```
///
/// - Important: The transport never shuts the client down: whoever created the `HTTPClient` shuts it down, after
///   the last refresher, store or registry that uses it has stopped (``UserSessions/UserSessionRegistry/shutdown()``
///   returns). `HTTPClient.shared` needs no shutdown.
///
/// Redirects: create the client with ``recommendedConfiguration`` (or any configuration with
/// `redirectConfiguration: .disallow`). A client that follows redirects is still safe to use: every request body is
/// sent as a single-pass stream, so AsyncHTTPClient never re-sends it (with the refresh token or the client secret
/// in it) to a 307 or 308 target, and a response reached through a redirect is reported as the first 3xx, which the
/// package refuses. Such a client may still make one body-less `GET` to a 301, 302 or 303 target (AsyncHTTPClient
/// drops the `Authorization` header when the target is another origin); `.disallow` avoids even that.
public struct AsyncHTTPClientTransport: HTTPTransport, Sendable {
    /// The client requests go through.
    public let client: HTTPClient

    /// A client configuration that suits the transport: redirects disallowed, no response decompression (a
    /// compressed body could inflate past the limit after it was checked).
    public static var recommendedConfiguration: HTTPClient.Configuration {
        HTTPClient.Configuration(redirectConfiguration: .disallow, decompression: .disabled)
    }

    /// Creates a transport that sends requests through `client`, which stays yours to shut down.
    public init(client: HTTPClient) {
        self.client = client
    }

    /// Sends `request` as described on ``UserSessions/HTTPTransport/send(_:)``.
    ///
    /// - Throws: ``UserSessions/HTTPTransportError/Code/responseTooLarge``;
    ///   ``UserSessions/HTTPTransportError/Code/timedOut`` when the deadline passed (also for AsyncHTTPClient's
    ///   connect, read and pool timeouts); `CancellationError` when the calling task is cancelled; AsyncHTTPClient's
    ///   or SwiftNIO's errors for other failures of the request.
    public func send(_ request: HTTPTransportRequest) async throws -> HTTPTransportResponse {
        try Task.checkCancellation()
        let client = client
        do {
            // AsyncHTTPClient's deadline covers the response head only; this one covers the body too.
            return try await Deadline.run(
                within: request.timeout, timedOut: { HTTPTransportError(.timedOut, "the deadline passed") }
            ) { try await Self.exchange(request, on: client) }
        } catch {
            if Task.isCancelled { throw CancellationError() }
            throw Self.translate(error, limit: request.maximumResponseBytes)
        }
    }

    /// Sends the request and collects the body, within the limit.
    private static func exchange(_ request: HTTPTransportRequest, on client: HTTPClient) async throws
        -> HTTPTransportResponse
    {
        var outgoing = HTTPClientRequest(url: request.url.absoluteString)
        outgoing.method = HTTPMethod(rawValue: request.method.rawValue)
        for field in request.headers { outgoing.headers.add(name: field.name, value: field.value) }
        let body = request.body ?? Data()
        // A single-pass stream, never replayable: AsyncHTTPClient does not re-send it to a redirect target, even
        // with a client that follows redirects. With a known length of zero it adds no header to a GET.
        outgoing.body = .stream(
            SinglePassBody(body.isEmpty ? nil : ByteBuffer(bytes: body)), length: .known(Int64(body.count)))
        let response = try await client.execute(outgoing, deadline: .now() + TimeAmount(request.timeout))
        if response.history.count > 1, let first = response.history.first?.responseHead {
            // The client followed a redirect after all: report the 3xx it followed, not the target's answer.
            return HTTPTransportResponse(
                statusCode: Int(first.status.code), headers: HTTPTransportHeaders(first.headers))
        }
        let bytes = try await response.body.collect(upTo: max(0, request.maximumResponseBytes))
        // A cancelled body stream may end early instead of throwing: never hand over a body cut short.
        try Task.checkCancellation()
        return HTTPTransportResponse(
            statusCode: Int(response.status.code), headers: HTTPTransportHeaders(response.headers),
            body: Data(bytes.readableBytesView))
    }

    /// Maps AsyncHTTPClient's and SwiftNIO's errors onto the codes the package understands.
    private static func translate(_ error: any Error, limit: Int) -> any Error {
        if error is NIOTooManyBytesError {
            return HTTPTransportError(
                .responseTooLarge, "the response body is larger than \(limit) bytes (the rest was not read)")
        }
        if let error = error as? HTTPClientError, timeouts.contains(error) {
            return HTTPTransportError(.timedOut, "the request timed out (\(error))")
        }
        if let error = error as? HTTPClientError, error == .cancelled { return CancellationError() }
        return error
    }

    private static let timeouts: [HTTPClientError] = [
        .deadlineExceeded, .readTimeout, .writeTimeout, .connectTimeout, .tlsHandshakeTimeout,
        .getConnectionFromPoolTimeout, .socksHandshakeTimeout, .httpProxyHandshakeTimeout,
    ]
}

/// A request body handed over once.
private struct SinglePassBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    let buffer: ByteBuffer?

    init(_ buffer: ByteBuffer?) {
        self.buffer = buffer
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        var buffer: ByteBuffer?

        mutating func next() async -> ByteBuffer? {
            defer { buffer = nil }
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(buffer: buffer)
    }
}

extension HTTPTransportHeaders {
    /// The fields of `headers`, in order.
    fileprivate init(_ headers: HTTPHeaders) {
        self.init(headers.map { HTTPTransportHeaders.Field(name: $0.name, value: $0.value) })
    }
}

extension TimeAmount {
    /// `duration`, clamped to what a `TimeAmount` holds.
    fileprivate init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        let (nanoseconds, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else {
            self = .nanoseconds(seconds < 0 ? 0 : .max)
            return
        }
        self = .nanoseconds(max(0, nanoseconds.addingReportingOverflow(attoseconds / 1_000_000_000).partialValue))
    }
}
#endif
