#if OpenIDConnect
import Foundation
import UserSessions

/// An ``OpenIDConnectStateStore`` in this process's memory: the default, for one server instance.
///
/// A callback that reaches another process cannot complete with it; share a ``FileOpenIDConnectStateStore`` or a
/// PostgreSQL store across a fleet. Sign-in records are bounded by ``maximumRecords`` (the oldest go first).
public final class InMemoryOpenIDConnectStateStore: OpenIDConnectStateStore {
    private struct State {
        var pending: [String: PendingSignIn] = [:]
        var records: [OpenIDSignInRecord] = []
        var logoutTokenIDs: [String: Date] = [:]
    }

    /// The most sign-in records kept.
    public let maximumRecords: Int
    private let state = Locked(State())

    /// Creates an empty store that keeps at most `maximumRecords` sign-in records (at least 1).
    public init(maximumRecords: Int = 100_000) {
        self.maximumRecords = max(1, maximumRecords)
    }

    /// Records `pending`; when `limit` unexpired ones are pending, the one that expires first is dropped.
    public func insert(_ pending: PendingSignIn, limit: Int, now: Date) async throws {
        state.withLock { state in
            state.pending = state.pending.filter { !$0.value.isExpired(at: now) }
            while state.pending.count >= max(1, limit),
                let oldest = state.pending.values.min(by: PendingSignIn.expiresFirst)
            {
                state.pending[oldest.state] = nil
            }
            state.pending[pending.state] = pending
        }
    }

    /// How many pending sign-ins are recorded (expired ones included until the next insert drops them).
    public var pendingCount: Int { state.withLock { $0.pending.count } }

    /// Removes and returns the unexpired pending sign-in named `state`.
    public func take(state key: String, now: Date) async throws -> PendingSignIn? {
        let pending = state.withLock { $0.pending.removeValue(forKey: key) }
        guard let pending, !pending.isExpired(at: now) else { return nil }
        return pending
    }

    /// Records a completed sign-in.
    public func record(_ signIn: OpenIDSignInRecord) async throws {
        let maximumRecords = maximumRecords
        state.withLock { state in
            state.records.removeAll { $0.identifier == signIn.identifier && $0.issuer == signIn.issuer }
            state.records.append(signIn)
            if state.records.count > maximumRecords { state.records.removeFirst(state.records.count - maximumRecords) }
        }
    }

    /// The records a logout concerns.
    public func records(issuer: String, subject: String?, sessionID: String?) async throws -> [OpenIDSignInRecord] {
        state.withLock { state in
            state.records.filter { $0.matches(issuer: issuer, subject: subject, sessionID: sessionID) }
        }
    }

    /// Forgets `identifier`'s records at `issuer`.
    public func forget(identifier: String, issuer: String) async throws {
        state.withLock { state in
            state.records.removeAll { $0.identifier == identifier && $0.issuer == issuer }
        }
    }

    /// Remembers a logout token id; `false` when it is a replay.
    public func remember(logoutTokenID tokenID: String, issuer: String, until expiresAt: Date, now: Date) async throws
        -> Bool
    {
        let key = issuer + "\u{0}" + tokenID
        return state.withLock { state in
            state.logoutTokenIDs = state.logoutTokenIDs.filter { $0.value > now }
            guard state.logoutTokenIDs[key] == nil else { return false }
            state.logoutTokenIDs[key] = expiresAt
            return true
        }
    }
}

extension PendingSignIn {
    /// Whether `first` expires before `second` (the earlier `state` on a tie): the order in which a full state store
    /// drops pending sign-ins.
    static func expiresFirst(_ first: PendingSignIn, _ second: PendingSignIn) -> Bool {
        (first.expiresAt, first.state) < (second.expiresAt, second.state)
    }
}

extension OpenIDConnectError {
    /// The error for a store that already holds `limit` pending sign-ins. The package's stores no longer throw it:
    /// a full store drops its oldest pending sign-in instead.
    public static func tooManyPending(_ limit: Int) -> OpenIDConnectError {
        OpenIDConnectError(
            .tooManyPendingSignIns, "\(limit) sign-ins are already pending; try again when some complete or expire",
            failureClass: .transient)
    }
}
#endif
