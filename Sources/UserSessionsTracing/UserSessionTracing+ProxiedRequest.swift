#if Tracing
import Foundation
import Tracing
import UserSessions

extension UserSessionTracing {
    /// The span of one request a token-forwarding proxy forwards upstream for a browser: the framework-neutral part
    /// of the web-session adapters' proxies.
    ///
    /// Runs `forward` in a span `user_sessions.proxy` (kind internal; the access token's acquisition, a refresh
    /// after a 401 and the replay are inside it) with `http.request.method`, `server.address`, `server.port`,
    /// `url.scheme` and `url.path` of the upstream URL (never its query), and `http.response.status_code` of the
    /// answer the browser gets (from 500 on, also `error.type` and status `error`). `forward` gets the header fields
    /// that carry the span's context upstream (for a W3C tracer, `traceparent`): it sets them on the forwarded
    /// request, replacing any the browser sent. A transport wrapped with ``TracingHTTPTransport`` replaces them again
    /// with its client span's context, a child of this span.
    ///
    /// - Parameters:
    ///   - method: The forwarded request's method.
    ///   - url: The upstream URL it goes to.
    ///   - statusCode: Reads the status of the answer.
    ///   - isolation: Where `forward` runs: the caller's isolation.
    ///   - forward: Forwards the request with the fields added, and returns the answer.
    public func traceProxiedRequest<Answer>(
        method: String,
        url: URL,
        statusCode: (Answer) -> Int,
        isolation: isolated (any Actor)? = #isolation,
        _ forward: (_ propagation: [(name: String, value: String)]) async throws -> Answer
    ) async throws -> Answer {
        try await SpanScope(tracer: tracer).run("user_sessions.proxy", kind: .internal, isolation: isolation) { span in
            span.attributes = HTTPSpanAttributes.request(method: method, url: url)
            var propagation = HTTPTransportHeaders()
            tracer.inject(span.context, into: &propagation, using: HTTPTransportHeadersInjector())
            let answer = try await forward(propagation.map { ($0.name, $0.value) })
            let status = statusCode(answer)
            span.attributes[SpanAttributeName.httpResponseStatusCode] = status
            if status >= 500 {
                span.attributes[SpanAttributeName.errorType] = String(status)
                span.setStatus(SpanStatus(code: .error))
            }
            return answer
        }
    }
}
#endif
