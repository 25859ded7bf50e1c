import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The one HTTP layer that ``OAuth2TokenRefresher`` and ``RemoteTokenStore`` send through, above any
/// ``HTTPTransport``. Whatever the transport, it:
/// - refuses every URL that is not `https`, or `http` to a loopback host, before anything is sent;
/// - asks for at most ``maximumResponseBytes`` of body, and checks the size again (a transport that ignored the cap
///   still cannot hand a larger body to a parser);
/// - treats every 3xx as a refused redirect (a transport must not follow them; this makes sure none is read as an
///   answer);
/// - puts a deadline of `timeout` around the call, so a transport that ignores ``HTTPTransportRequest/timeout`` is
///   still cancelled then;
/// - turns every failure into one ``HTTPExchangeFailure``, with a message that never holds the request or body.
package struct GuardedHTTPClient: Sendable {
    /// The largest response body read: 1 MiB.
    package static let maximumResponseBytes = 1024 * 1024

    /// The transport requests go through.
    let transport: any HTTPTransport
    /// What the endpoint is called in messages, such as "the token endpoint".
    let endpointName: String
    /// What the layer's own deadline waits on: real time, or a test's manual clock.
    let deadlineClock: DeadlineClock

    /// A client over `transport`, or over a new ``URLSessionHTTPTransport`` when it is `nil`.
    package init(
        transport: (any HTTPTransport)?, endpointName: String, deadlineClock: DeadlineClock = .realTime
    ) {
        self.transport = transport ?? URLSessionHTTPTransport()
        self.endpointName = endpointName
        self.deadlineClock = deadlineClock
    }

    /// Sends one request and returns a response whose status is not 3xx and whose body is within the limit.
    ///
    /// - Throws: ``UserSessionError/Code/insecureEndpoint`` for a URL that breaks the rule above (nothing is sent);
    ///   ``HTTPExchangeFailure`` for everything else that went wrong.
    /// `maximumResponseBytes` replaces ``maximumResponseBytes`` as the limit of this one request (for a proxy that
    /// forwards bodies of its own size).
    package func send(
        _ method: HTTPTransportRequest.Method, _ url: URL, headers: HTTPTransportHeaders, body: Data? = nil,
        timeout: Duration, maximumResponseBytes: Int = GuardedHTTPClient.maximumResponseBytes
    ) async throws -> HTTPTransportResponse {
        try SecureEndpoint.check(url, describedAs: endpointName)
        let timeout = timeout > .zero ? timeout : .milliseconds(1)
        let request = HTTPTransportRequest(
            method: method, url: url, headers: headers, body: body, timeout: timeout,
            maximumResponseBytes: maximumResponseBytes)
        let transport = transport
        let response: HTTPTransportResponse
        do {
            response = try await Deadline.run(
                within: timeout, clock: deadlineClock,
                timedOut: { HTTPTransportError(.timedOut, "the deadline passed") }
            ) { try await transport.send(request) }
        } catch {
            throw failure(error)
        }
        if response.body.count > maximumResponseBytes { throw failure(HTTPTransportError(.responseTooLarge)) }
        if (300..<400).contains(response.statusCode) {
            throw HTTPExchangeFailure(
                .redirected,
                "\(endpointName) answered HTTP \(response.statusCode) (redirects are not followed)")
        }
        return response
    }

    /// Classifies what a transport threw.
    private func failure(_ error: any Error) -> HTTPExchangeFailure {
        if error is CancellationError || Task.isCancelled {
            return HTTPExchangeFailure(.cancelled, "the request to \(endpointName) was cancelled", underlying: error)
        }
        let code = (error as? HTTPTransportError)?.code
        if code == .timedOut || (error as? URLError)?.code == .timedOut {
            return HTTPExchangeFailure(.timedOut, "the request to \(endpointName) timed out", underlying: error)
        }
        if code == .responseTooLarge {
            return HTTPExchangeFailure(
                .responseTooLarge,
                "\(endpointName) answered with a body larger than the limit (the rest was not read)",
                underlying: error)
        }
        let what = (error as? URLError).map { "URLError \($0.code.rawValue)" } ?? String(describing: type(of: error))
        return HTTPExchangeFailure(.failed, "the request to \(endpointName) failed (\(what))", underlying: error)
    }
}

/// Why an exchange through ``GuardedHTTPClient`` failed. Each client turns it into its own ``UserSessionError``.
package struct HTTPExchangeFailure: Error, Sendable {
    package enum Kind: Sendable, Equatable {
        /// The calling task was cancelled.
        case cancelled
        /// The deadline passed.
        case timedOut
        /// The body was longer than the limit.
        case responseTooLarge
        /// The endpoint answered 3xx.
        case redirected
        /// Any other failure of the request (connection refused, reset, TLS…).
        case failed
    }

    package var kind: Kind
    /// What happened, naming the endpoint; never holds a secret.
    package var message: String
    package var underlying: (any Error)?

    init(_ kind: Kind, _ message: String, underlying: (any Error)? = nil) {
        self.kind = kind
        self.message = message
        self.underlying = underlying
    }
}
