#if Tracing
import Tracing
import UserSessions

/// Runs an operation in a span of its own: started in the current context, current while the operation runs,
/// ended when it returns or throws.
///
/// Unlike `Tracer.withSpan`, a thrown error is not recorded as it is (its description might hold a secret): the
/// span gets status `error` and `error.type` (``errorType(_:)``) instead.
struct SpanScope: Sendable {
    /// The span of the operation that ``run(_:kind:isolation:_:)`` runs, in the context current while it runs.
    enum OperationSpanKey: ServiceContextKey {
        typealias Value = any Span
    }

    let tracer: any Tracer

    func run<Result>(
        _ name: String,
        kind: SpanKind,
        isolation: isolated (any Actor)? = #isolation,
        _ body: (any Span) async throws -> Result
    ) async throws -> Result {
        let span = tracer.startSpan(name, context: ServiceContext.current ?? .topLevel, ofKind: kind)
        defer { span.end() }
        var context = span.context
        context[OperationSpanKey.self] = span
        do {
            return try await ServiceContext.$current.withValue(
                context, operation: { try await body(span) }, isolation: isolation)
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
