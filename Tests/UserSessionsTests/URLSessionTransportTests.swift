import Testing
import UserSessions
import UserSessionsTestSupport

/// The shared transport suite (``TransportCheck``) over the default transport, `URLSessionHTTPTransport`. The
/// AsyncHTTPClient transport runs the same cases in UserSessionsIntegrationTests when its trait is on.
struct URLSessionTransportTests {
    @Test(arguments: TransportCheck.allCases)
    func theSharedTransportSuite(_ check: TransportCheck) async throws {
        try await check.run(on: .urlSession)
    }
}
