#if Tracing
import Synchronization
import Tracing
import UserSessions

/// An in-memory tracer for the tracing tests: it keeps every span that ended, links spans through a W3C-shaped
/// trace and span identifier in the context, and injects and extracts `traceparent`.
///
/// Give each test its own instance (no global bootstrap), so that parallel tests never see each other's spans.
package final class RecordingTracer: Tracer {
    package typealias Span = RecordingSpan

    /// What `startSpan` puts in the context: the identifiers of the span, for its children and for `inject`.
    enum SpanIDsKey: ServiceContextKey {
        typealias Value = RecordedSpan.IDs
    }

    private struct State {
        var nextID: UInt64 = 0
        var ended: [RecordedSpan] = []
        var waiters: [Waiter] = []
    }

    /// A test waiting for `count` spans named `name` to end.
    private struct Waiter {
        var name: String
        var count: Int
        var continuation: CheckedContinuation<[RecordedSpan], Never>
    }

    private let state = Mutex(State())

    package init() {}

    /// The spans that ended, in the order they ended.
    package var endedSpans: [RecordedSpan] { state.withLock { $0.ended } }

    /// The ended spans named `name`.
    package func spans(named name: String) -> [RecordedSpan] { endedSpans.filter { $0.name == name } }

    /// Waits until `count` spans named `name` have ended, and returns them (a span ends after the operation it
    /// measures has returned to its caller, so a test waits for it instead of guessing).
    package func waitForSpans(named name: String, count: Int = 1) async -> [RecordedSpan] {
        await withVisibleCheckedContinuation { continuation in
            let ready = state.withLock { state -> [RecordedSpan]? in
                let spans = state.ended.filter { $0.name == name }
                if spans.count >= count { return spans }
                state.waiters.append(Waiter(name: name, count: count, continuation: continuation))
                return nil
            }
            if let ready { continuation.resumeVisibly(returning: ready) }
        }
    }

    /// Records `span` and wakes the tests it completes, after the lock is released.
    private func ended(_ span: RecordedSpan) {
        let ready = state.withLock { state -> [(CheckedContinuation<[RecordedSpan], Never>, [RecordedSpan])] in
            state.ended.append(span)
            var ready: [(CheckedContinuation<[RecordedSpan], Never>, [RecordedSpan])] = []
            state.waiters.removeAll { waiter in
                let spans = state.ended.filter { $0.name == waiter.name }
                guard spans.count >= waiter.count else { return false }
                ready.append((waiter.continuation, spans))
                return true
            }
            return ready
        }
        for (continuation, spans) in ready { continuation.resumeVisibly(returning: spans) }
    }

    package func startSpan<Instant: TracerInstant>(
        _ operationName: String,
        context: @autoclosure () -> ServiceContext,
        ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant,
        function: String,
        file fileID: String,
        line: UInt
    ) -> RecordingSpan {
        var context = context()
        let parent = context[SpanIDsKey.self]
        let number = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        let spanID = Self.hex(number, digits: 16)
        let ids = RecordedSpan.IDs(
            traceID: parent?.traceID ?? Self.hex(number, digits: 32), spanID: spanID, parentSpanID: parent?.spanID)
        context[SpanIDsKey.self] = ids
        return RecordingSpan(name: operationName, kind: kind, ids: ids, context: context) { [weak self] span in
            self?.ended(span)
        }
    }

    package func forceFlush() {}

    package func inject<Carrier, Inject>(_ context: ServiceContext, into carrier: inout Carrier, using injector: Inject)
    where Inject: Injector, Inject.Carrier == Carrier {
        guard let ids = context[SpanIDsKey.self] else { return }
        injector.inject("00-\(ids.traceID)-\(ids.spanID)-01", forKey: "traceparent", into: &carrier)
    }

    package func extract<Carrier, Extract>(
        _ carrier: Carrier, into context: inout ServiceContext, using extractor: Extract
    ) where Extract: Extractor, Extract.Carrier == Carrier {
        guard let value = extractor.extract(key: "traceparent", from: carrier) else { return }
        let parts = value.split(separator: "-")
        guard parts.count == 4 else { return }
        context[SpanIDsKey.self] = RecordedSpan.IDs(
            traceID: String(parts[1]), spanID: String(parts[2]), parentSpanID: nil)
    }

    private static func hex(_ value: UInt64, digits: Int) -> String {
        let text = String(value, radix: 16)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}

/// A span of a ``RecordingTracer`` while it is open.
package final class RecordingSpan: Tracing.Span {
    private struct State {
        var name: String
        var attributes = SpanAttributes()
        var status: SpanStatus?
        var events: [SpanEvent] = []
        var errors: [String] = []
        var ended = false
    }

    package let context: ServiceContext
    private let kind: SpanKind
    private let ids: RecordedSpan.IDs
    private let state: Mutex<State>
    private let onEnd: @Sendable (RecordedSpan) -> Void

    init(
        name: String, kind: SpanKind, ids: RecordedSpan.IDs, context: ServiceContext,
        onEnd: @escaping @Sendable (RecordedSpan) -> Void
    ) {
        self.kind = kind
        self.ids = ids
        self.context = context
        self.onEnd = onEnd
        state = Mutex(State(name: name))
    }

    package var operationName: String {
        get { state.withLock { $0.name } }
        set { state.withLock { $0.name = newValue } }
    }

    package var attributes: SpanAttributes {
        get { state.withLock { $0.attributes } }
        set { state.withLock { $0.attributes = newValue } }
    }

    package var isRecording: Bool { state.withLock { !$0.ended } }

    package func setStatus(_ status: SpanStatus) { state.withLock { $0.status = status } }

    package func addEvent(_ event: SpanEvent) { state.withLock { $0.events.append(event) } }

    package func recordError<Instant: TracerInstant>(
        _ error: any Error, attributes: SpanAttributes, at instant: @autoclosure () -> Instant
    ) {
        // What a real tracer would export as `exception.message`.
        let description = String(describing: error)
        state.withLock { $0.errors.append(description) }
    }

    package func addLink(_ link: SpanLink) {}

    package func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {
        // The record is made under the lock, handed to the tracer after it.
        let record = state.withLock { state -> RecordedSpan? in
            guard !state.ended else { return nil }
            state.ended = true
            return RecordedSpan(
                name: state.name, kind: kind, ids: ids, attributes: state.attributes, status: state.status,
                events: state.events, errors: state.errors)
        }
        if let record { onEnd(record) }
    }
}

/// A span of a ``RecordingTracer`` that ended.
package struct RecordedSpan: Sendable {
    /// A span's place in its trace.
    package struct IDs: Sendable, Hashable {
        package var traceID: String
        package var spanID: String
        package var parentSpanID: String?
    }

    package var name: String
    package var kind: SpanKind
    package var ids: IDs
    package var attributes: SpanAttributes
    package var status: SpanStatus?
    package var events: [SpanEvent]
    /// The descriptions of the errors recorded with `recordError`.
    package var errors: [String]

    /// The attribute `name` as text (any kind of value), or `nil`.
    package func attribute(_ name: String) -> String? {
        attributes.get(name).map(Self.text)
    }

    /// A value as text: `3`, `true`, `POST`.
    static func text(_ value: SpanAttribute) -> String {
        switch value {
        case .string(let value): value
        case .int64(let value): String(value)
        case .int32(let value): String(value)
        case .bool(let value): String(value)
        case .double(let value): String(value)
        case .stringConvertible(let value): value.description
        default: "\(value)"
        }
    }

    /// Every name, value, event and recorded error of the span, as text: what a leak check searches.
    package var allText: String {
        var parts = [name]
        attributes.forEach { key, value in parts.append("\(key)=\(Self.text(value))") }
        for event in events {
            parts.append(event.name)
            event.attributes.forEach { key, value in parts.append("\(key)=\(Self.text(value))") }
        }
        return (parts + errors).joined(separator: "\n")
    }

    /// Whether the span ended with status `error`.
    package var failed: Bool { status?.code == .error }
}
#endif
