#if Hummingbird
import HTTPTypes
import Hummingbird
import UserSessionsWeb

// The adapter's only work: Hummingbird's request into the layer's, the layer's answer into Hummingbird's response.

extension WebRequest {
    /// `request` as the web-session layer sees it; its body is read only when the layer asks, up to its limit.
    init(_ request: Request) {
        self.init(
            method: request.method, path: request.uri.path, query: request.uri.query, headers: request.headers
        ) { limit in
            var request = request
            let body = try await request.collectBody(upTo: limit)
            return Array(body.readableBytesView)
        }
    }
}

extension Response {
    /// The web-session layer's answer as a Hummingbird response.
    init(_ response: WebResponse) {
        self.init(
            status: response.status, headers: response.headers,
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: response.body)))
    }
}

extension Cookie {
    /// The web-session layer's cookie, with the attributes it decided.
    init(_ cookie: WebSessionCookie) {
        self.init(
            name: cookie.name, value: cookie.value, maxAge: cookie.maxAge, path: cookie.path, secure: cookie.isSecure,
            httpOnly: true, sameSite: .lax)
    }
}
#endif
