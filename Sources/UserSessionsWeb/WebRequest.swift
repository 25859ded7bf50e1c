#if Hummingbird || Vapor
import Foundation
import HTTPTypes

/// A request as the web-session layer sees it, free of any framework: each adapter (Hummingbird, Vapor) translates
/// its own request into one, and the layer decides the answer.
package struct WebRequest: Sendable {
    /// The request's method.
    package var method: HTTPRequest.Method
    /// The request's path, percent-encoded as it was sent, without the query.
    package var path: String
    /// The request's query (after `?`), if any.
    package var query: String?
    /// The request's header fields.
    package var headers: HTTPFields
    /// Reads the body, refusing one longer than the given number of bytes (the adapter's collector throws).
    private let collectBody: @Sendable (Int) async throws -> [UInt8]

    /// A request; `collectBody` reads the body up to a limit and throws past it.
    package init(
        method: HTTPRequest.Method, path: String, query: String?, headers: HTTPFields,
        collectBody: @escaping @Sendable (Int) async throws -> [UInt8]
    ) {
        self.method = method
        self.path = path
        self.query = query.flatMap { $0.isEmpty ? nil : $0 }
        self.headers = headers
        self.collectBody = collectBody
    }

    /// The body, or `nil` when it is longer than `limit` bytes or cannot be read.
    package func body(upTo limit: Int) async -> [UInt8]? {
        try? await collectBody(limit)
    }

    /// The value of the cookie `name` (the first one, when the browser sent several), or `nil`.
    package func cookie(_ name: String) -> String? {
        for field in headers where field.name == .cookie {
            if let value = Self.cookie(name, in: field.value.utf8) { return value }
        }
        return nil
    }

    /// The value of the first pair named `name` in one `Cookie` field (`a=1; b=2`), scanned in place: every signed-in
    /// request reads one.
    static func cookie(_ name: String, in field: String.UTF8View) -> String? {
        var start = field.startIndex
        while start < field.endIndex {
            let end = field[start...].firstIndex(of: UInt8(ascii: ";")) ?? field.endIndex
            var pairStart = start
            while pairStart < end, field[pairStart] == UInt8(ascii: " ") { field.formIndex(after: &pairStart) }
            if let equals = field[pairStart..<end].firstIndex(of: UInt8(ascii: "=")),
                field[pairStart..<equals].elementsEqual(name.utf8)
            {
                return String(Substring(field[field.index(after: equals)..<end]))
            }
            start = end < field.endIndex ? field.index(after: end) : end
        }
        return nil
    }

    /// The first value of the query parameter `name`, percent-decoded (`+` as a space), or `nil`.
    package func queryParameter(_ name: String) -> String? {
        guard let query else { return nil }
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts[0] == name else { continue }
            let value = parts.count > 1 ? parts[1].replacingOccurrences(of: "+", with: " ") : ""
            return value.removingPercentEncoding ?? value
        }
        return nil
    }

    /// Whether the request is a browser navigation (a GET or HEAD that accepts HTML).
    package var isNavigation: Bool {
        guard method == .get || method == .head else { return false }
        return headers[values: .accept].contains { $0.lowercased().contains("text/html") }
    }
}
#endif
