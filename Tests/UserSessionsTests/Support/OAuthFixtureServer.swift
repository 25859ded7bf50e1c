import Foundation
import UserSessions

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Runs `Fixtures/oauth_server.py` on 127.0.0.1 for one test and stops it afterwards.
///
/// Not `Sendable`: a test uses it from its own task and hands only URLs to other tasks.
final class OAuthFixtureServer {
    struct Stats: Decodable, Sendable {
        var tokenRequests: Int
        var refreshes: Int
        var invalidGrant: Int
        var invalidClient: Int
        var reuseDetected: Int
        var redirectTargetHits: Int
        var lastAuth: String?
        var lastScope: String?

        enum CodingKeys: String, CodingKey {
            case tokenRequests = "token_requests"
            case refreshes
            case invalidGrant = "invalid_grant"
            case invalidClient = "invalid_client"
            case reuseDetected = "reuse_detected"
            case redirectTargetHits = "redirect_target_hits"
            case lastAuth = "last_auth"
            case lastScope = "last_scope"
        }
    }

    private let process: Process
    private let input: Pipe
    let port: Int

    private init(process: Process, port: Int, input: Pipe) {
        self.process = process
        self.port = port
        self.input = input
    }

    static var scriptURL: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/oauth_server.py")
    }

    /// Starts the server with extra command-line `arguments` (for example `["--auth", "post"]`).
    static func start(_ arguments: [String] = []) throws -> OAuthFixtureServer {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", scriptURL.path] + arguments
        let output = Pipe()
        let input = Pipe()
        process.standardOutput = output
        // The server exits when this pipe closes, so a crashed test run leaves no server behind.
        process.standardInput = input
        try process.run()
        var line = Data()
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty || byte == Data("\n".utf8) { break }
            line.append(byte)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self)) else {
            process.terminate()
            throw UserSessionError(.transportFailure, "the OAuth fixture server did not start")
        }
        return OAuthFixtureServer(process: process, port: port, input: input)
    }

    /// Runs `body` with a fresh server and stops it afterwards, whatever happens.
    static func with<R>(_ arguments: [String] = [], _ body: (OAuthFixtureServer) async throws -> R) async throws -> R {
        let server = try start(arguments)
        do {
            let result = try await body(server)
            server.stop()
            return result
        } catch {
            server.stop()
            throw error
        }
    }

    func stop() {
        try? input.fileHandleForWriting.close()
        process.terminate()
        process.waitUntilExit()
    }

    var baseURL: URL { URL(string: "http://127.0.0.1:\(port)") ?? URL(fileURLWithPath: "/nonexistent") }
    var tokenEndpoint: URL { baseURL.appendingPathComponent("token") }

    private func request(_ method: String, _ path: String, json: [String: Any]? = nil) async throws -> Data {
        var request = URLRequest(url: baseURL.appendingPathComponent(path))
        request.httpMethod = method
        if let json { request.httpBody = try JSONSerialization.data(withJSONObject: json) }
        let (data, _) = try await URLSession.shared.data(for: request)
        return data
    }

    /// A new token family: its first refresh and access tokens.
    func issue() async throws -> (refreshToken: String, accessToken: String) {
        let data = try await request("POST", "admin/issue")
        let object = try JSONSerialization.jsonObject(with: data) as? [String: String]
        guard let refresh = object?["refresh_token"], let access = object?["access_token"] else {
            throw UserSessionError(.transportFailure, "bad issue response")
        }
        return (refresh, access)
    }

    /// Revokes every token family.
    func revokeAll() async throws { _ = try await request("POST", "admin/revoke") }

    /// Sets the server's mode and settings, such as `["mode": "error500"]` or `["expires_in": "120"]`.
    func configure(_ settings: [String: Any]) async throws {
        _ = try await request("POST", "admin/mode", json: settings)
    }

    func stats() async throws -> Stats {
        try JSONDecoder().decode(Stats.self, from: try await request("GET", "stats"))
    }
}
