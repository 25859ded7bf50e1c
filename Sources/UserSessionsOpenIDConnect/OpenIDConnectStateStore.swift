#if OpenIDConnect
import Foundation

/// Where an ``OpenIDConnectClient`` keeps what outlives one request: pending sign-ins, who signed in with which
/// provider session (for back-channel logout), and the logout tokens already seen (against replays).
///
/// The callback may reach another server instance than the one that redirected the browser, and a back-channel
/// logout may reach any instance: a fleet shares one store. The package has three: ``InMemoryOpenIDConnectStateStore``
/// (one process, the default), ``FileOpenIDConnectStateStore`` (processes of one machine sharing a directory) and,
/// with the PostgreSQL trait, `PostgresOpenIDConnectStateStore`.
///
/// Every method may throw; the client turns a failure into ``OpenIDConnectError/Code/storeFailure``.
public protocol OpenIDConnectStateStore: Sendable {
    /// Records `pending`, first dropping expired pending sign-ins. When `limit` unexpired ones are already recorded,
    /// drops the ones that expire first to make room: a full store never refuses a new sign-in (a flood can only
    /// shorten how long the others stay pending).
    func insert(_ pending: PendingSignIn, limit: Int, now: Date) async throws

    /// Removes the pending sign-in named `state` and returns it, or `nil` when there is none or it has expired.
    /// Exactly one of concurrent calls for the same `state` may get it, across every process sharing the store.
    func take(state: String, now: Date) async throws -> PendingSignIn?

    /// Records a completed sign-in (replacing an earlier record of the same identifier and issuer).
    func record(_ signIn: OpenIDSignInRecord) async throws

    /// The records that a logout for `subject` and/or `sessionID` at `issuer` concerns
    /// (``OpenIDSignInRecord/matches(issuer:subject:sessionID:)``).
    func records(issuer: String, subject: String?, sessionID: String?) async throws -> [OpenIDSignInRecord]

    /// Forgets the records of `identifier` at `issuer`.
    func forget(identifier: String, issuer: String) async throws

    /// Remembers the logout token `tokenID` (its `jti`) of `issuer` until `expiresAt`, dropping expired ones.
    /// Returns `false`, and changes nothing, when it is already remembered: the token is a replay.
    func remember(logoutTokenID tokenID: String, issuer: String, until expiresAt: Date, now: Date) async throws -> Bool
}
#endif
