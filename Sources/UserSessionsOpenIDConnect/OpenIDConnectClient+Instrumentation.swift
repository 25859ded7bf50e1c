#if OpenIDConnect
import UserSessions

extension OpenIDConnectClient {
    /// Runs `body`, the client's `operation`, measured by ``OpenIDConnectConfiguration/instrumentation`` (or as is
    /// without one), keeping its typed error.
    func measure<Result>(
        _ operation: UserSessionOperation,
        isolation: isolated (any Actor)? = #isolation,
        _ body: () async throws(OpenIDConnectError) -> Result
    ) async throws(OpenIDConnectError) -> Result {
        guard let instrumentation = configuration.instrumentation else { return try await body() }
        do {
            return try await instrumentation.measure(operation, isolation: isolation) { try await body() }
        } catch let error as OpenIDConnectError {
            throw error
        } catch {
            // Only an instrumentation that broke its contract (it must throw what `body` throws) gets here.
            throw OpenIDConnectError(
                .invalidConfiguration, "the instrumentation threw \(type(of: error))", failureClass: .misconfiguration)
        }
    }
}
#endif
