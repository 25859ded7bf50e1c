#if Hummingbird || Vapor
import HTTPTypes
import UserSessions

#if Tracing
import UserSessionsTracing
#endif

extension TokenForwardingProxy {
    /// Runs `forward` for `request` (whose path below the mount point is `subpath`) as the user of `session`: in a
    /// `user_sessions.proxy` span when the session's controller is traced (its configuration's instrumentation is
    /// a `UserSessionTracing`, trait `Tracing`), with the span's context set on the request as the headers that
    /// carry it upstream (`traceparent`, replacing the browser's); as is otherwise. Both web adapters forward through
    /// here.
    func traced(
        _ request: WebRequest, subpath: String, session: WebSession,
        _ forward: (WebRequest) async throws -> WebResponse
    ) async throws -> WebResponse {
        #if Tracing
        guard let tracing = session.controller.configuration.instrumentation as? UserSessionTracing,
            let url = url(forSubpath: subpath, query: nil)
        else { return try await forward(request) }
        return try await tracing.traceProxiedRequest(
            method: request.method.rawValue, url: url, statusCode: { Int($0.status.code) }
        ) { propagation in
            var request = request
            for (name, value) in propagation {
                if let name = HTTPField.Name(name) { request.headers[name] = value }
            }
            return try await forward(request)
        }
        #else
        return try await forward(request)
        #endif
    }
}
#endif
