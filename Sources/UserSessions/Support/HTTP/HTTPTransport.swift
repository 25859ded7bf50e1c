import Foundation

/// Sends HTTP requests for ``OAuth2TokenRefresher`` and ``RemoteTokenStore``.
///
/// The package ships ``URLSessionHTTPTransport`` (the default). Implement this protocol to send the requests through
/// another client, such as AsyncHTTPClient on a server. The package keeps everything else in one place above the
/// transport, whichever you use: the HTTPS-or-loopback rule, treating every 3xx as a refused redirect, a deadline
/// of ``HTTPTransportRequest/timeout`` around each call, a second check of the body size, and the parsing and
/// classification of the answers (RFC 6749 §5.2 for the token endpoint).
///
/// - Important: A transport sees refresh tokens, client secrets and stored credentials in its requests. It must not
///   log or otherwise keep them, and must not send anything anywhere but the request's URL.
public protocol HTTPTransport: Sendable {
    /// Sends one request and returns the whole response.
    ///
    /// - Must not follow redirects: a 3xx is returned as it is (a redirect could carry the body, and the secrets in
    ///   it, to another host).
    /// - Must stop reading the body as soon as it is longer than ``HTTPTransportRequest/maximumResponseBytes`` and
    ///   throw ``HTTPTransportError/Code/responseTooLarge``, without buffering the rest.
    /// - Must give up after ``HTTPTransportRequest/timeout`` (from the call to the end of the body) and throw
    ///   ``HTTPTransportError/Code/timedOut``.
    /// - Must honour cancellation of the calling task: stop the request and throw (a `CancellationError` is best).
    ///
    /// Any other error means the request failed (connection refused, reset, TLS failure…); its description must not
    /// contain the request's body or headers.
    func send(_ request: HTTPTransportRequest) async throws -> HTTPTransportResponse
}

/// One HTTP request for an ``HTTPTransport``.
public struct HTTPTransportRequest: Sendable {
    /// An HTTP method, as an extensible enum-like struct.
    public struct Method: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The method's name, such as `POST`.
        public var rawValue: String
        /// Creates a method named `rawValue`.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// `GET`.
        public static let get = Method(rawValue: "GET")
        /// `POST`.
        public static let post = Method(rawValue: "POST")
        /// The method's name.
        public var description: String { rawValue }
    }

    /// The method.
    public var method: Method
    /// The URL, query included. The package only builds `https` URLs, or `http` ones to a loopback host.
    public var url: URL
    /// The header fields, in the order they are to be sent.
    public var headers: HTTPTransportHeaders
    /// The body, if any.
    public var body: Data?
    /// How long the whole exchange may take, from sending to the end of the response body.
    public var timeout: Duration
    /// The longest response body the caller accepts, in bytes. A transport stops reading past it and throws
    /// ``HTTPTransportError/Code/responseTooLarge``.
    public var maximumResponseBytes: Int

    /// Creates a request.
    public init(
        method: Method,
        url: URL,
        headers: HTTPTransportHeaders = [],
        body: Data? = nil,
        timeout: Duration,
        maximumResponseBytes: Int
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.maximumResponseBytes = maximumResponseBytes
    }
}

/// One HTTP response from an ``HTTPTransport``.
public struct HTTPTransportResponse: Sendable {
    /// The status code, such as 200.
    public var statusCode: Int
    /// The header fields; look them up with ``HTTPTransportHeaders/subscript(_:)``, which ignores case.
    public var headers: HTTPTransportHeaders
    /// The whole body (empty when there is none).
    public var body: Data

    /// Creates a response.
    public init(statusCode: Int, headers: HTTPTransportHeaders = [], body: Data = Data()) {
        self.statusCode = statusCode
        self.headers = headers
        self.body = body
    }
}

/// HTTP header fields in order, with lookups that ignore the case of names.
public struct HTTPTransportHeaders: Sendable, Hashable, Sequence, ExpressibleByArrayLiteral {
    /// One header field.
    public struct Field: Sendable, Hashable {
        /// The name, as given.
        public var name: String
        /// The value.
        public var value: String

        /// Creates a field.
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// The fields, in order.
    public private(set) var fields: [Field]

    /// Creates headers holding `fields` in order.
    public init(_ fields: [Field] = []) {
        self.fields = fields
    }

    /// Creates headers from `(name, value)` pairs, such as `[("Accept", "application/json")]`.
    public init(arrayLiteral elements: (String, String)...) {
        fields = elements.map { Field(name: $0.0, value: $0.1) }
    }

    /// The value of the first field named `name` (compared ignoring case), or `nil`.
    public subscript(_ name: String) -> String? {
        fields.first { Self.sameName($0.name, name) }?.value
    }

    /// The values of every field named `name` (compared ignoring case), in order.
    public func values(for name: String) -> [String] {
        fields.filter { Self.sameName($0.name, name) }.map(\.value)
    }

    /// Appends a field, keeping any of the same name.
    public mutating func add(name: String, value: String) {
        fields.append(Field(name: name, value: value))
    }

    /// Replaces every field named `name` (ignoring case) by one field with `value`, where the first one was, or at
    /// the end.
    public mutating func replaceOrAdd(name: String, value: String) {
        guard let first = fields.firstIndex(where: { Self.sameName($0.name, name) }) else {
            return add(name: name, value: value)
        }
        fields[first] = Field(name: name, value: value)
        fields = fields.enumerated().filter { $0.offset == first || !Self.sameName($0.element.name, name) }
            .map(\.element)
    }

    /// An iterator over the fields, in order.
    public func makeIterator() -> IndexingIterator<[Field]> {
        fields.makeIterator()
    }

    /// Header names are ASCII; compare them ignoring ASCII case only.
    private static func sameName(_ lhs: String, _ rhs: String) -> Bool {
        lhs.utf8.count == rhs.utf8.count
            && zip(lhs.utf8, rhs.utf8).allSatisfy { asciiLowercase($0) == asciiLowercase($1) }
    }

    private static func asciiLowercase(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 : byte
    }
}

/// The failures an ``HTTPTransport`` reports in a form the package understands. Any other error thrown by a
/// transport counts as a failed request.
public struct HTTPTransportError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, as an extensible enum-like struct; errors are equal when their codes are.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The code's name.
        public var rawValue: String
        /// Creates a code named `rawValue`.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The body was longer than ``HTTPTransportRequest/maximumResponseBytes``; the rest was not read.
        public static let responseTooLarge = Code(rawValue: "responseTooLarge")
        /// The exchange took longer than ``HTTPTransportRequest/timeout``.
        public static let timedOut = Code(rawValue: "timedOut")
        /// The code's name.
        public var description: String { rawValue }
    }

    /// What went wrong.
    public var code: Code
    /// A description for people. It must never contain a secret.
    public var message: String

    /// Creates an error.
    public init(_ code: Code, _ message: String = "") {
        self.code = code
        self.message = message
    }

    /// `HTTPTransportError.<code>: <message>`.
    public var description: String {
        message.isEmpty ? "HTTPTransportError.\(code)" : "HTTPTransportError.\(code): \(message)"
    }

    /// Errors are equal when their codes are.
    public static func == (lhs: HTTPTransportError, rhs: HTTPTransportError) -> Bool { lhs.code == rhs.code }

    /// Hashes the code.
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }
}
