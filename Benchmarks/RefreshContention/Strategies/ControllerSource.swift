import UserSessions

/// The package under test, through its public API only.
struct ControllerSource: TokenSource {
    let controller: UserSessionController

    nonisolated(nonsending) func token() async throws -> String {
        try await controller.accessToken()
    }
}
