#if ServiceLifecycle
import ServiceLifecycle
import UserSessions

/// A registry runs as a `Service` in a `ServiceGroup`.
///
/// List the registry **before** the services that use it (an HTTP server, a queue consumer): a group shuts its
/// services down in reverse order, so the servers stop taking requests first and the registry closes the sessions
/// last, when nothing asks for a token any more.
///
/// ```swift
/// let group = ServiceGroup(
///     services: [registry, httpServer],
///     gracefulShutdownSignals: [.sigterm, .sigint],
///     logger: logger)
/// try await group.run()
/// ```
extension UserSessionRegistry: Service {
    /// Suspends until graceful shutdown is triggered or the task is cancelled, then calls
    /// ``UserSessions/UserSessionRegistry/shutdown()``.
    ///
    /// Shutting down closes every session (stored credentials are kept, so the next process restores them), waits
    /// for pending token-store writes (each close waits at most
    /// ``UserSessions/UserSessionController/Configuration/storeTimeout`` per write) and for refreshes still in flight
    /// and the writes of what they rotated (at most that long again), stops every session's services within their
    /// deadlines, and finishes every event stream.
    ///
    /// - Important: Cancellation ends it too, and it runs the same shutdown then: `run()` never throws and never
    ///   traps, whatever its position in the group; the closing itself does not hang on a cancelled task, because
    ///   every wait in it has its own deadline.
    public func run() async throws {
        await runUntilShutdown { await self.shutdown() }
    }
}

/// A single controller (an app's, or a worker's acting for one user) runs as a `Service` the same way.
extension UserSessionController: Service {
    /// Suspends until graceful shutdown is triggered or the task is cancelled, then calls
    /// ``UserSessions/UserSessionController/shutdown()``: the session is closed (credentials kept), pending writes
    /// are flushed within ``UserSessions/UserSessionController/Configuration/storeTimeout``, a refresh still in
    /// flight is waited for (at most that long again) and what it rotated is written, and every event stream
    /// finishes. Never throws.
    public nonisolated func run() async throws {
        await runUntilShutdown { await self.shutdown() }
    }
}

/// Waits for graceful shutdown or cancellation (whichever comes first), then runs `shutdown`.
func runUntilShutdown(_ shutdown: () async -> Void) async {
    // Throws only `CancellationError`: cancellation ends the wait just as graceful shutdown does.
    try? await gracefulShutdown()
    await shutdown()
}
#endif
