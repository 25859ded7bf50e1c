#if Tracing
import Tracing
import UserSessions

/// Writes a propagated field into a request's headers, replacing one of the same name.
struct HTTPTransportHeadersInjector: Injector {
    func inject(_ value: String, forKey key: String, into headers: inout HTTPTransportHeaders) {
        headers.replaceOrAdd(name: key, value: value)
    }
}
#endif
