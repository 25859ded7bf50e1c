import Foundation
import UserSessions

/// An ``HTTPTransport`` for the shared transport suite (``TransportCheck``): each check gets a new one and releases
/// it (or shuts its client down) afterwards.
package struct TransportUnderTest: Sendable, CustomStringConvertible {
    /// The transport's name in test output, such as "URLSession".
    package let description: String
    private let scope: @Sendable (_ body: @Sendable (any HTTPTransport) async throws -> Void) async throws -> Void

    /// A transport made and disposed of by `scope`, which runs the body it is given once.
    package init(
        _ name: String,
        scope: @escaping @Sendable (_ body: @Sendable (any HTTPTransport) async throws -> Void) async throws -> Void
    ) {
        description = name
        self.scope = scope
    }

    /// The package's default transport.
    package static let urlSession = TransportUnderTest("URLSession") { body in
        try await body(URLSessionHTTPTransport())
    }

    /// Runs `body` with a new transport.
    package func with(_ body: @Sendable (any HTTPTransport) async throws -> Void) async throws {
        try await scope(body)
    }
}

/// A failed expectation of the shared transport suite. The suite throws instead of recording issues so that it can
/// live outside the test targets (the benchmark links this module too).
package struct TransportCheckFailure: Error, CustomStringConvertible {
    package var description: String

    package init(description: String) {
        self.description = description
    }
}

/// Throws ``TransportCheckFailure`` with `message` unless `condition` holds.
package func check(
    _ condition: Bool, _ message: @autoclosure () -> String, line: Int = #line
) throws {
    if !condition { throw TransportCheckFailure(description: "TransportCheck line \(line): \(message())") }
}
