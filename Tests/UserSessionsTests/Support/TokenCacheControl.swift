import Foundation
import Testing

@testable import UserSessions

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Talks to the fixture's control endpoints.
struct TokenCacheControl {
    let server: FixtureServer

    var endpoint: URL { server.url("/token_cache") }

    func setMode(_ mode: String, code: String? = nil) async throws {
        var components = URLComponents(url: server.url("/__control"), resolvingAgainstBaseURL: false)
        components?.queryItems =
            [URLQueryItem(name: "mode", value: mode)] + (code.map { [URLQueryItem(name: "code", value: $0)] } ?? [])
        let url = try #require(components?.url)
        let (_, response) = try await URLSession.shared.data(from: url)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
    }

    /// The last protocol request as the server saw it, undecoded.
    func lastRequest() async throws -> [String: String] {
        let (data, _) = try await URLSession.shared.data(from: server.url("/__last"))
        return try JSONDecoder().decode([String: String].self, from: data)
    }

    /// A raw GET of `query` against the endpoint, returning the parsed response.
    func rawFetch(query: String) async throws -> RemoteTokenCacheProtocol.Response {
        let url = try #require(URL(string: endpoint.absoluteString + "?" + query))
        let (data, _) = try await URLSession.shared.data(from: url)
        return try RemoteTokenCacheProtocol.parseResponse(data)
    }

    /// A GET of one of the fixture's own paths, such as `/__release`; the body.
    @discardableResult
    func get(_ path: String) async throws -> Data {
        try await URLSession.shared.data(from: server.url(path)).0
    }

    /// Stores `tokenInfo` under `uniqueID` with a raw POST, bypassing the store.
    func postRaw(uniqueID: String, tokenInfo: String) async throws {
        var request = URLRequest(url: endpoint)
        request.httpMethod = "POST"
        request.httpBody = Data(FormURLEncoding.encode([("unique_id", uniqueID), ("token_info", tokenInfo)]).utf8)
        let (data, _) = try await URLSession.shared.data(for: request)
        #expect(try RemoteTokenCacheProtocol.parseResponse(data).status)
    }
}

func withTokenCache<Result>(
    arguments: [String] = [],
    _ body: (TokenCacheControl) async throws -> Result
) async throws -> Result {
    try await FixtureServer.run(script: "token_cache_server.py", arguments: arguments) { server in
        try await body(TokenCacheControl(server: server))
    }
}
