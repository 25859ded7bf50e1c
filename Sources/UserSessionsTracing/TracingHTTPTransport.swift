#if Tracing
import Foundation
import Tracing
import UserSessions

/// An `HTTPTransport` that makes an HTTP client span for every request sent through the transport it
/// wraps, and propagates the trace context upstream.
///
/// The span is named after the method (`GET`, `POST`), kind client, with OpenTelemetry's HTTP client attributes:
/// `http.request.method`, `server.address`, `server.port`, `url.scheme`, `url.path` (never the query, which may
/// carry an identifier), `http.response.status_code`, and `error.type` (the status code from 400 on, or the
/// error's code or type when the request fails; the span's status is then `error`). The tracer injects the span's
/// context into the request's headers (for a W3C tracer, `traceparent` and `tracestate`), so the server's spans
/// join the trace. Headers and bodies never become attributes.
///
/// Give it to `OAuth2TokenRefresher`, `RemoteTokenStore` or the OpenID Connect
/// client, so that the refresh, the store and sign-in spans get a child for each remote call. Make one with
/// `HTTPTransport/tracing(_:)`.
public struct TracingHTTPTransport<Base: HTTPTransport>: HTTPTransport, Sendable {
    /// The transport that sends the requests.
    public let base: Base
    /// Makes the spans and injects their context.
    public let tracer: any Tracer

    /// Wraps `base`, with spans made by `tracer` (default: the one bootstrapped in `InstrumentationSystem`).
    public init(_ base: Base, tracer: any Tracer = InstrumentationSystem.tracer) {
        self.base = base
        self.tracer = tracer
    }

    public func send(_ request: HTTPTransportRequest) async throws -> HTTPTransportResponse {
        try await SpanScope(tracer: tracer).run(request.method.rawValue, kind: .client, isolation: nil) { span in
            span.attributes = HTTPSpanAttributes.request(method: request.method.rawValue, url: request.url)
            var request = request
            tracer.inject(span.context, into: &request.headers, using: HTTPTransportHeadersInjector())
            let response = try await base.send(request)
            Self.record(statusCode: response.statusCode, on: span)
            return response
        }
    }

    /// Records the response's status; from 400 on, the span failed (OpenTelemetry's rule for client spans).
    static func record(statusCode: Int, on span: any Span) {
        span.attributes[SpanAttributeName.httpResponseStatusCode] = statusCode
        if statusCode >= 400 {
            span.attributes[SpanAttributeName.errorType] = String(statusCode)
            span.setStatus(SpanStatus(code: .error))
        }
    }
}

extension HTTPTransport {
    /// This transport, with an HTTP client span for every request and the trace context propagated in its headers
    /// (see ``TracingHTTPTransport``).
    public func tracing(_ tracer: any Tracer = InstrumentationSystem.tracer) -> TracingHTTPTransport<Self> {
        TracingHTTPTransport(self, tracer: tracer)
    }
}
#endif
