#if Vapor
import HTTPTypes
import UserSessionsWeb
import Vapor

// The adapter's only work: Vapor's request into the layer's, the layer's answer into Vapor's response.

extension WebRequest {
    /// `request` as the web-session layer sees it; its body is read only when the layer asks, up to its limit.
    init(_ request: Request) {
        // A method name HTTPTypes refuses is treated as state-changing (the cross-site check's stricter side).
        let method = HTTPRequest.Method(request.method.rawValue) ?? .post
        self.init(
            method: method, path: request.url.path, query: request.url.query,
            headers: VaporTranslation.fields(request.headers)
        ) { limit in
            guard let body = try await request.body.collect(max: limit).get() else { return [] }
            // A body Vapor collected before the route (its own strategy) is held to the layer's limit too.
            guard body.readableBytes <= limit else { throw Abort(.payloadTooLarge) }
            return Array(body.readableBytesView)
        }
    }
}

/// Conversions between Vapor's (NIO's) HTTP types and HTTPTypes, which the web-session layer speaks.
enum VaporTranslation {
    /// `headers` as HTTPTypes fields, in order; a field whose name HTTPTypes refuses is left out.
    static func fields(_ headers: HTTPHeaders) -> HTTPFields {
        var fields = HTTPFields()
        for (name, value) in headers {
            guard let name = HTTPField.Name(name) else { continue }
            fields.append(HTTPField(name: name, value: value))
        }
        return fields
    }

    /// `fields` as Vapor's headers, in order.
    static func headers(_ fields: HTTPFields) -> HTTPHeaders {
        HTTPHeaders(fields.map { ($0.name.rawName, $0.value) })
    }

    /// The web-session layer's answer as a Vapor response.
    static func response(_ response: WebResponse) -> Response {
        Response(
            status: HTTPResponseStatus(statusCode: response.status.code), headers: headers(response.headers),
            body: Response.Body(buffer: ByteBuffer(bytes: response.body)))
    }

    /// `status` as Vapor's.
    static func method(_ method: HTTPRequest.Method) -> HTTPMethod {
        HTTPMethod(rawValue: method.rawValue)
    }
}
#endif
