#if Tracing
import Tracing
import UserSessions

/// Runs an operation in a span of its own: started in the current context, current while the operation runs,
/// ended when it returns or throws.
///
/// Unlike `Tracer.withSpan`, a thrown error is not recorded as it is (its description might hold a secret): the
/// span gets status `error` and `error.type` (``errorType(_:)``) instead.
struct SpanScope: Sendable {
    /// The span of the refresh flight running in this task, for `UserSessionTracing.observeRefresh(_:)`: a task
    /// local of its own, so the spans of the store and transport calls made inside the flight (the report comes
    /// from inside the lease of a coordinated store) never hide it, whatever a tracer keeps in their contexts.
    @TaskLocal static var refreshSpan: (any Span)?

    let tracer: any Tracer

    /// Runs `body` in a span named `name`, current while it runs; with `bindingRefreshSpan`, the span is also
    /// ``refreshSpan`` while it runs.
    func run<Result>(
        _ name: String,
        kind: SpanKind,
        bindingRefreshSpan: Bool = false,
        isolation: isolated (any Actor)? = #isolation,
        _ body: (any Span) async throws -> Result
    ) async throws -> Result {
        let span = tracer.startSpan(name, context: ServiceContext.current ?? .topLevel, ofKind: kind)
        defer { span.end() }
        do {
            guard bindingRefreshSpan else {
                return try await ServiceContext.$current.withValue(
                    span.context, operation: { try await body(span) }, isolation: isolation)
            }
            return try await Self.$refreshSpan.withValue(
                span,
                operation: {
                    try await ServiceContext.$current.withValue(
                        span.context, operation: { try await body(span) }, isolation: isolation)
                }, isolation: isolation)
        } catch {
            Self.recordFailure(error, on: span)
            throw error
        }
    }

    /// Marks `span` failed with `error`, by its type only.
    static func recordFailure(_ error: any Error, on span: any Span) {
        span.attributes[SpanAttributeName.errorType] = errorType(error)
        span.setStatus(SpanStatus(code: .error))
    }

    /// OpenTelemetry's `error.type` for `error`, never a description: a `UserSessionError`'s or an
    /// `HTTPTransportError`'s code, `cancelled`, the code of an error of the package's other modules
    /// (`OpenIDConnectError`, `WebSessionError`: a `code` whose text is a short identifier), or the type's name.
    static func errorType(_ error: any Error) -> String {
        if let error = error as? UserSessionError { return error.code.description }
        if let error = error as? HTTPTransportError { return error.code.rawValue }
        if error is CancellationError { return "cancelled" }
        // This module does not import the others; their errors are structs with a `code` named like a Swift
        // identifier. Anything else (an error whose `code` could be free text) is named by its type.
        if let code = Mirror(reflecting: error).children.first(where: { $0.label == "code" })?.value {
            let text = String(describing: code)
            if isIdentifier(text) { return text }
        }
        return String(describing: type(of: error))
    }

    /// Whether `text` is a letter followed by at most 63 letters, digits or underscores.
    private static func isIdentifier(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        func isLetter(_ byte: UInt8) -> Bool { (65...90).contains(byte) || (97...122).contains(byte) }
        guard let first = bytes.first, isLetter(first), bytes.count <= 64 else { return false }
        return bytes.allSatisfy { isLetter($0) || (48...57).contains($0) || $0 == 95 }
    }
}
#endif
