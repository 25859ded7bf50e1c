#if Tracing
import Tracing
import UserSessions

/// A `TokenStore` that makes a span for every call to the store it wraps.
///
/// Each call is a span `user_sessions.store.<operation>` (kind internal) with OpenTelemetry's `db.operation.name`
/// (`load`, `save`, `remove`, `loadCurrentIdentifier`, `saveCurrentIdentifier`, `storedIdentifiers`, and for a
/// coordinated store `loadRevised`, `saveRevised`, `withRefreshLease`), `user_sessions.store.type` (the wrapped
/// store's type), `user_sessions.store.found` after a load, and status `error` with `error.type` when the call
/// throws. Neither identifiers nor stored sessions ever become attributes. Wrapping a
/// `CoordinatedTokenStore` keeps its coordination (the lease, the conditional write and the change
/// notifications pass through; the lease's span lasts while it is held, so the refresh made under it is its child).
///
/// Make one with `TokenStore/tracing(_:)`. A class, so that every controller given this instance
/// shares one owner of each user's credentials, as with any other store instance.
public final class TracingTokenStore<Base: TokenStore>: TokenStore, Sendable {
    /// The store that does the work.
    public let base: Base
    /// Makes the spans.
    public let tracer: any Tracer

    /// Wraps `base`, with spans made by `tracer` (default: the one bootstrapped in `InstrumentationSystem`).
    public init(_ base: Base, tracer: any Tracer = InstrumentationSystem.tracer) {
        self.base = base
        self.tracer = tracer
    }

    public func load(identifier: String) async throws -> StoredSession? {
        try await traced("load") { span in
            let session = try await base.load(identifier: identifier)
            span.attributes[SpanAttributeName.storeFound] = session != nil
            return session
        }
    }

    public func save(_ session: StoredSession, identifier: String) async throws {
        try await traced("save") { _ in try await base.save(session, identifier: identifier) }
    }

    public func remove(identifier: String) async throws {
        try await traced("remove") { _ in try await base.remove(identifier: identifier) }
    }

    public func loadCurrentIdentifier() async throws -> String? {
        try await traced("loadCurrentIdentifier") { _ in try await base.loadCurrentIdentifier() }
    }

    public func saveCurrentIdentifier(_ identifier: String?) async throws {
        try await traced("saveCurrentIdentifier") { _ in try await base.saveCurrentIdentifier(identifier) }
    }

    public func storedIdentifiers() async throws -> [String] {
        try await traced("storedIdentifiers") { _ in try await base.storedIdentifiers() }
    }

    /// Runs `body`, the store call `operation`, in a span of its own.
    func traced<Result>(
        _ operation: String, _ body: (any Span) async throws -> Result
    ) async throws -> Result {
        try await SpanScope(tracer: tracer).run("user_sessions.store.\(operation)", kind: .internal, isolation: nil) {
            span in
            span.updateAttributes { attributes in
                attributes[SpanAttributeName.dbOperationName] = operation
                attributes[SpanAttributeName.storeType] = String(describing: Base.self)
            }
            return try await body(span)
        }
    }
}

extension TracingTokenStore: CoordinatedTokenStore where Base: CoordinatedTokenStore {
    public func loadRevised(identifier: String) async throws -> RevisedSession? {
        try await traced("loadRevised") { span in
            let record = try await base.loadRevised(identifier: identifier)
            span.attributes[SpanAttributeName.storeFound] = record != nil
            return record
        }
    }

    public func save(_ session: StoredSession, identifier: String, expectedRevision: UInt64?) async throws -> UInt64 {
        try await traced("saveRevised") { _ in
            try await base.save(session, identifier: identifier, expectedRevision: expectedRevision)
        }
    }

    public func withRefreshLease<Result: Sendable>(
        identifier: String, _ body: @Sendable () async throws -> Result
    ) async throws -> Result {
        // The span lasts as long as the lease: the refresh made under it (its store and transport calls) are
        // its children.
        try await traced("withRefreshLease") { _ in try await base.withRefreshLease(identifier: identifier, body) }
    }

    public func changes() -> AsyncStream<TokenStoreChange> {
        base.changes()
    }
}

extension TokenStore {
    /// This store, with a span for every call (see ``TracingTokenStore``).
    public func tracing(_ tracer: any Tracer = InstrumentationSystem.tracer) -> TracingTokenStore<Self> {
        TracingTokenStore(self, tracer: tracer)
    }
}
#endif
