#if Hummingbird || Vapor
import Foundation

/// The one error type of the web-session layer (UserSessionsWeb, and the Hummingbird and Vapor adapters).
///
/// Errors are compared by ``code`` only. Descriptions never hold a cookie value, a token or a key hash.
public struct WebSessionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, as an extensible enum-like struct.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The code's name.
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }

        /// A setting cannot work (for example a public URL on plain HTTP that is not loopback).
        public static let invalidConfiguration = Code("invalidConfiguration")
        /// A stored browser record cannot be read (a corrupt file or row, an unknown format).
        public static let storeCorrupt = Code("storeCorrupt")
        /// The store of browser records failed (I/O, PostgreSQL); the request may be retried.
        public static let storeFailure = Code("storeFailure")

        /// The code's name.
        public var description: String { rawValue }
    }

    /// What went wrong.
    public var code: Code
    /// A human-readable explanation; never holds a secret.
    public var message: String

    /// Creates an error.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// `WebSessionError.<code>: <message>`.
    public var description: String { "WebSessionError.\(code): \(message)" }

    /// Errors are equal when their codes are equal.
    public static func == (lhs: WebSessionError, rhs: WebSessionError) -> Bool { lhs.code == rhs.code }
}
#endif
