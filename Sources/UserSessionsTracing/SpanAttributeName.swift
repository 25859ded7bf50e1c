#if Tracing
/// The attribute names the spans use: OpenTelemetry's semantic conventions where one fits, `user_sessions.` where
/// none does.
enum SpanAttributeName {
    static let errorType = "error.type"
    static let httpRequestMethod = "http.request.method"
    static let httpResponseStatusCode = "http.response.status_code"
    static let serverAddress = "server.address"
    static let serverPort = "server.port"
    static let urlScheme = "url.scheme"
    static let urlPath = "url.path"
    static let dbOperationName = "db.operation.name"
    static let storeType = "user_sessions.store.type"
    static let storeFound = "user_sessions.store.found"
    static let refreshOutcome = "user_sessions.refresh.outcome"
    static let refreshWaiters = "user_sessions.refresh.waiters"
    static let refreshFailureClass = "user_sessions.refresh.failure_class"
}
#endif
