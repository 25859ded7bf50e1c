import Foundation
import Testing

@testable import UserSessions

/// `leader` asks for an access token with `server` holding refreshes (its tokens must be due), and once its refresh is
/// at the server, `joiner`, holding the same credentials, asks too: returns both requests once the joiner waits on the
/// leader's refresh in `ledger`. The server still holds the refresh: the caller releases it.
func leadAndJoinAHeldRefresh(
    _ leader: UserSessionController, _ joiner: UserSessionController, server: TokenFamilyServer,
    ledger: CredentialsLedger
) async throws -> (leader: Task<String, any Error>, joiner: Task<String, any Error>) {
    server.holdRefreshes()
    let leading = Task { try await leader.accessToken() }
    await server.started.wait(for: 1)
    let joining = Task { try await joiner.accessToken() }
    try await withHangGuard("the second controller joins the refresh") {
        while ledger.joinedWaiters("alice") < 1 { await Task.yield() }
    }
    return (leading, joining)
}
