#if Hummingbird
import HTTPTypes
import Hummingbird
import UserSessions

#if Tracing
import UserSessionsTracing
#endif

extension TokenForwardingProxy {
    /// Runs `forward` for `request` (whose path below the mount point is `subpath`) as the user of `session`: in a
    /// `user_sessions.proxy` span when the session's controller is traced (its configuration's instrumentation is
    /// a `UserSessionTracing`, trait `Tracing`), with the span's context set on the request as the headers that
    /// carry it upstream (`traceparent`, replacing the browser's); as is otherwise.
    func traced(
        _ request: Request, subpath: String, session: WebSession, _ forward: (Request) async throws -> Response
    ) async throws -> Response {
        #if Tracing
        guard let tracing = session.controller.configuration.instrumentation as? UserSessionTracing,
            let url = url(forSubpath: subpath, query: nil)
        else { return try await forward(request) }
        return try await tracing.traceProxiedRequest(
            method: request.method.rawValue, url: url, statusCode: { Int($0.status.code) }
        ) { propagation in
            var head = request.head
            for (name, value) in propagation {
                if let name = HTTPField.Name(name) { head.headerFields[name] = value }
            }
            return try await forward(Request(head: head, body: request.body))
        }
        #else
        return try await forward(request)
        #endif
    }
}
#endif
