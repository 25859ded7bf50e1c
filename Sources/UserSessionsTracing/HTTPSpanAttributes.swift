#if Tracing
import Foundation
import Tracing

/// OpenTelemetry's attributes of an HTTP request, shared by the transport's client spans and the proxy's spans.
enum HTTPSpanAttributes {
    /// OpenTelemetry's attributes of an HTTP client request to `url`; the query and the fragment are left out.
    static func request(method: String, url: URL) -> SpanAttributes {
        var attributes = SpanAttributes()
        attributes[SpanAttributeName.httpRequestMethod] = method
        if let components = URLComponents(url: url, resolvingAgainstBaseURL: false) {
            attributes[SpanAttributeName.serverAddress] = components.host
            attributes[SpanAttributeName.urlScheme] = components.scheme
            attributes[SpanAttributeName.urlPath] =
                components.percentEncodedPath.isEmpty
                ? "/" : components.percentEncodedPath
            if let port = components.port ?? Self.defaultPort(components.scheme) {
                attributes[SpanAttributeName.serverPort] = port
            }
        }
        return attributes
    }

    private static func defaultPort(_ scheme: String?) -> Int? {
        switch scheme?.lowercased() {
        case "https": 443
        case "http": 80
        default: nil
        }
    }
}
#endif
