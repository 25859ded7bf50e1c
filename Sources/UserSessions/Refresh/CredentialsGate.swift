import Foundation
import Synchronization

/// The single-flight gate in front of a session's credentials.
///
/// SKELETON: holds credentials and hands out the access token; refresh to be implemented (issue 3).
///
/// The controller calls ``activate(identifier:userInfo:credentials:generation:)`` when a session opens (before
/// its services start) and ``deactivate()`` first thing when it closes, is replaced or becomes invalid.
final class CredentialsGate: Sendable {
    private struct State {
        var generation: UInt64 = 0
        var identifier: String?
        var userInfo: UserInfo?
        var credentials: Credentials?
        var active = false
    }
    private let state = Mutex(State())
    private let terminalFailureHandler = Mutex<(@Sendable (UInt64) async -> Void)?>(nil)
    let refresher: (any TokenRefresher)?
    let store: any TokenStore
    let events: EventHub
    let configuration: UserSessionController.Configuration

    init(
        refresher: (any TokenRefresher)?,
        store: any TokenStore,
        events: EventHub,
        configuration: UserSessionController.Configuration
    ) {
        self.refresher = refresher
        self.store = store
        self.events = events
        self.configuration = configuration
    }

    /// Sets what the gate calls when a refresh fails terminally; the controller then invalidates the session of
    /// that generation (if it is still the current one).
    func setTerminalFailureHandler(_ handler: @escaping @Sendable (UInt64) async -> Void) {
        terminalFailureHandler.withLock { $0 = handler }
    }

    /// Starts serving `credentials` for a newly opened session of `generation`.
    func activate(identifier: String, userInfo: UserInfo, credentials: Credentials?, generation: UInt64) {
        state.withLock {
            $0 = State(
                generation: generation, identifier: identifier, userInfo: userInfo, credentials: credentials,
                active: true)
        }
    }

    /// Stops serving: waiters fail with ``UserSessionError/Code/sessionNotOpen``, a refresh still in flight is
    /// discarded when it finishes, and an in-flight write completes before this returns.
    func deactivate() async {
        state.withLock { $0.active = false }
    }

    /// The hot path: the access token if it is fresh, without suspending.
    func freshAccessToken() -> String? {
        state.withLock { $0.active ? $0.credentials?.accessToken : nil }
    }

    /// A valid access token, refreshing (single-flight) when needed.
    func accessToken() async throws -> String {
        if let token = freshAccessToken() { return token }
        throw UserSessionError(.sessionNotOpen, "no session is open")
    }

    /// The current credentials, if a session is open.
    func currentCredentials() -> Credentials? {
        state.withLock { $0.active ? $0.credentials : nil }
    }

    /// Makes sure the active credentials are usable, refreshing them if they are expired (used by `restore`).
    func ensureUsable() async throws {
        _ = try await accessToken()
    }
}
