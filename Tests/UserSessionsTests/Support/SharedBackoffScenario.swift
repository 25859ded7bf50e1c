import Foundation
import Testing

@testable import UserSessions

/// Alice is signed in on two controllers, `first` and `second` (tokens valid for an hour, refreshed by `server` on
/// `time`), when the token endpoint goes down and her tokens expire. Her refresh fails transiently on `first`; `second`
/// backs off with it and fails at once with that failure, asking nothing; `whileBackedOff` runs then (the server must
/// still have been asked once when it returns). Once the backoff is over, with the server back, one refresh serves
/// both. Both controllers are closed at the end.
func expectOneBackoffForTheUser(
    _ first: UserSessionController, _ second: UserSessionController, server: TokenFamilyServer, time: ManualTime,
    whileBackedOff: () async throws -> Void = {}, sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    server.setDown(true)
    time.advance(by: 3601)
    let failure = await #expect(throws: UserSessionError.self, sourceLocation: sourceLocation) {
        try await first.accessToken()
    }
    #expect(failure?.failureClass == .transient && server.calls == 1, sourceLocation: sourceLocation)
    let backedOff = await #expect(throws: UserSessionError.self, sourceLocation: sourceLocation) {
        try await second.accessToken()
    }
    #expect(backedOff?.failureClass == .transient, sourceLocation: sourceLocation)
    #expect(
        server.calls == 1, "another controller of the user asked the failing server again",
        sourceLocation: sourceLocation)
    try await whileBackedOff()

    // Past the backoff (at most the 1-s initial delay), with the server back: one refresh for both.
    server.setDown(false)
    time.advance(by: 1)
    #expect(try await second.accessToken() == "alice/at-1", sourceLocation: sourceLocation)
    #expect(try await first.accessToken() == "alice/at-1", sourceLocation: sourceLocation)
    #expect(server.calls == 2 && server.reuses == 0, sourceLocation: sourceLocation)
    await first.close()
    await second.close()
}
