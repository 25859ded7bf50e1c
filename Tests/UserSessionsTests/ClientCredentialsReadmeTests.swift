import Foundation
import Testing

@testable import UserSessions

// The README's example under "## Tokens for the server itself", compiled and run against the fixture's token
// endpoint on 127.0.0.1. The lines between the BEGIN and END markers are the README's ```swift block, except for four
// spaces of indentation and the substitution in `ClientCredentialsReadmeTests.substitutions` (the endpoint).

/// Stands in for "your HTTP call": the first call is refused (a 401), to exercise the replay.
private final class OrdersAPI: Sendable {
    let calls = ArrivalCounter()
    let tokens = Locked([String]())

    func list(bearer token: String, unauthorized: any Error) async throws -> [String] {
        calls.arrive()
        tokens.withLock { $0.append(token) }
        if calls.count == 1 { throw unauthorized }
        return ["order-1"]
    }
}

private func readmeClientCredentials(directory: URL, tokenEndpoint: URL, api: OrdersAPI) async throws -> [String] {
    func listOrders(bearer token: String) async throws -> [String] {
        try await api.list(bearer: token, unauthorized: Unauthorized())
    }
    // BEGIN README CLIENT CREDENTIALS
    struct Unauthorized: Error {}
    let tokens = try ClientCredentialsTokenManager(
        tokenEndpoint: tokenEndpoint,
        clientAuthentication: .clientSecretBasic(id: "orders-service", secret: "client-secret"),
        // Optional: with a store a restart reuses a stored token; with a PostgresTokenStore, the whole fleet does.
        configuration: .init(store: FileTokenStore(directory: directory)))
    let orders = try await tokens.withAccessToken(
        for: .init(scopes: ["orders.read"], resources: ["https://orders.example.com/"]),
        isAuthenticationFailure: { $0 is Unauthorized }
    ) { token in
        try await listOrders(bearer: token)  // your HTTP call; throw Unauthorized on a 401
    }
    // END README CLIENT CREDENTIALS
    return orders
}

struct ClientCredentialsReadmeTests {
    static let substitutions: [(readme: String, here: String)] = [
        (#"URL(string: "https://id.example.com/oauth2/token")!"#, "tokenEndpoint")
    ]

    @Test func theProgramHereIsTheReadmesExample() throws {
        let difference = try ReadmeBlock.difference(
            heading: "## Tokens for the server itself", substitutions: Self.substitutions, sourceFile: #filePath,
            marker: "README CLIENT CREDENTIALS")
        #expect(difference == nil, "\(difference ?? "")")
    }

    @Test func theReadmesExampleRunsAgainstALocalTokenEndpoint() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "cc-readme-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await OAuthFixtureServer.with(["--client-id", "orders-service", "--client-secret", "client-secret"]) {
            server in
            let api = OrdersAPI()
            let orders = try await readmeClientCredentials(
                directory: directory, tokenEndpoint: server.tokenEndpoint, api: api)
            #expect(orders == ["order-1"])
            let used = api.tokens.withLock { $0 }
            #expect(used.count == 2)
            #expect(used.first != used.last)  // the replay ran with a new token
            let stats = try await server.stats()
            #expect(stats.clientCredentials == 2)
            #expect(stats.lastScope == "orders.read")
            #expect(stats.lastResources == ["https://orders.example.com/"])
            // The new token is stored: the next run adopts it without a request, and only the replay after its
            // refused first call asks (3 grants in all, not 4).
            let again = try await readmeClientCredentials(
                directory: directory, tokenEndpoint: server.tokenEndpoint, api: OrdersAPI())
            #expect(again == ["order-1"])
            #expect(try await server.stats().clientCredentials == 3)
        }
    }
}
