/// Runs the package's own operations inside a scope of yours: the seam for tracing.
///
/// Wrappers see every store call (a ``TokenStore`` wrapper) and every remote call (an ``HTTPTransport`` wrapper),
/// but not the operations that make them: a refresh flight (run in a task of the package's own, shared by every
/// caller waiting for it), a restore, a revocation at sign-out. The package calls
/// ``measure(_:isolation:_:)`` around each of those, so that an instrumentation can open a span, make it the
/// current context of the task while the operation runs (the store and transport calls made inside become its
/// children), and close it when the operation returns or throws.
///
/// Set it in ``UserSessionController/Configuration/instrumentation``. The product `UserSessionsTracing` (trait
/// `Tracing`) implements it with swift-distributed-tracing; this protocol needs no other package.
///
/// How a refresh ended (its outcome, failure class and how many callers shared it) is reported to the observers
/// (``UserSessionObserver/observeRefresh(_:)``), synchronously on the task of the flight and so inside
/// ``measure(_:isolation:_:)``: an instrumentation that is also an observer can annotate the scope it opened.
///
/// - Important: `measure` must call `body` exactly once and return what it returns (or throw what it throws). It is
///   called outside every lock of the package. Nothing passed to it contains a secret.
public protocol UserSessionInstrumentation: Sendable {
    /// Runs `body`, the operation `operation`, in the caller's isolation.
    func measure<Result>(
        _ operation: UserSessionOperation,
        isolation: isolated (any Actor)?,
        _ body: () async throws -> Result
    ) async throws -> Result
}

/// An operation of the package that a ``UserSessionInstrumentation`` measures.
///
/// An extensible set of names (new ones are not a breaking change), lower case with dots, usable as span names.
public struct UserSessionOperation: Sendable, Hashable, CustomStringConvertible {
    /// The name, for example `user_sessions.refresh`.
    public var name: String

    /// An operation named `name`.
    public init(name: String) {
        self.name = name
    }

    /// A refresh flight: one refresher call (or an adoption of what another process stored) shared by every caller
    /// that waited for it.
    public static let refresh = UserSessionOperation(name: "user_sessions.refresh")
    /// Restoring a stored session: the store read, the checks, and opening the session.
    public static let restore = UserSessionOperation(name: "user_sessions.restore")
    /// Revoking credentials at the authorization server (RFC 7009) while signing out.
    public static let revocation = UserSessionOperation(name: "user_sessions.revocation")
    /// Completing a sign-in: the code exchange and the validation of the callback and its id_token.
    public static let signIn = UserSessionOperation(name: "user_sessions.sign_in")
    /// Fetching the provider's signing keys (its JWKS).
    public static let keySetFetch = UserSessionOperation(name: "user_sessions.jwks_fetch")
    /// Handling a back-channel logout token.
    public static let backChannelLogout = UserSessionOperation(name: "user_sessions.backchannel_logout")

    public var description: String { name }
}

extension Optional where Wrapped == any UserSessionInstrumentation {
    /// Runs `body` measured by the instrumentation, or as is without one.
    func measure<Result>(
        _ operation: UserSessionOperation,
        isolation: isolated (any Actor)? = #isolation,
        _ body: () async throws -> Result
    ) async throws -> Result {
        guard let instrumentation = self else { return try await body() }
        return try await instrumentation.measure(operation, isolation: isolation, body)
    }

    /// Runs `body`, which cannot fail, measured by the instrumentation, or as is without one.
    func measure(
        _ operation: UserSessionOperation,
        isolation: isolated (any Actor)? = #isolation,
        _ body: () async -> Void
    ) async {
        guard let instrumentation = self else { return await body() }
        // `body` throws nothing, and an instrumentation returns what it returns.
        try? await instrumentation.measure(operation, isolation: isolation, body)
    }
}
