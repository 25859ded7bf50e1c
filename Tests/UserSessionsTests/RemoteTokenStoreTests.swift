import Foundation
import Testing

@testable import UserSessions

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

struct RemoteTokenStoreTests {
    /// Whole seconds: the protocol's date format keeps milliseconds, so these round-trip exactly.
    static func session(id: String, accessToken: String, refreshToken: String? = "refresh-secret") -> StoredSession {
        StoredSession(
            userInfo: UserInfo(id: id, email: "user@example.com", name: "Zoë Ünicode", attributes: ["k": "v & w"]),
            credentials: Credentials(
                accessToken: accessToken,
                refreshToken: refreshToken,
                expiresAt: Date(timeIntervalSince1970: 1_900_000_000),
                lastRefreshedAt: Date(timeIntervalSince1970: 1_899_996_400.5),
                source: .signIn,
                grantedPermissions: ["email", "read write"],
                declinedPermissions: ["photos"]
            )
        )
    }

    static let nastyTokens = [
        "a&b=c+d%20e f", "=&&==", "%", "%%41", "+", "+ +", " leading and trailing ", "ü∂😀 non-ASCII",
        "line\nbreak\r\ttab", "quote\"back\\slash", "{\"json\": [1]}", "a=1&unique_id=evil", "~._-",
    ]

    @Test func roundTripsTokensWithReservedAndNonASCIICharacters() async throws {
        try await withTokenCache { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            for (index, token) in Self.nastyTokens.enumerated() {
                let session = Self.session(id: "user-\(index)", accessToken: token, refreshToken: "r" + token)
                try await store.save(session, identifier: "user-\(index)")
                #expect(try await store.load(identifier: "user-\(index)") == session, "token #\(index)")
            }
            // The body on the wire used only unreserved characters, `%XX`, `&` and `=`.
            try await store.save(Self.session(id: "u", accessToken: "a b+c&d=e%f"), identifier: "u")
            let last = try await cache.lastRequest()
            #expect(last["method"] == "POST")
            #expect(last["content_type"]?.hasPrefix("application/x-www-form-urlencoded") == true)
            let body = try #require(last["body"])
            #expect(body.hasPrefix("unique_id=u-u&token_info="))
            #expect(body.contains("a%20b%2Bc%26d%3De%25f"))
            let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~%&=")
            #expect(body.allSatisfy { allowed.contains($0) })
        }
    }

    @Test func sendsATraversalProofUniqueIDForHostileIdentifiers() async throws {
        try await withTokenCache { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            let identifiers = [
                "../../etc/passwd", "a/b", "..", ".", "User@Example.com", String(repeating: "x", count: 300), "é",
                "e\u{301}",
            ]
            for (index, identifier) in identifiers.enumerated() {
                try await store.save(Self.session(id: "\(index)", accessToken: "t\(index)"), identifier: identifier)
                let query = try #require(try await cache.lastRequest()["body"]?.split(separator: "&").first)
                #expect(query == "unique_id=" + (try IdentifierEncoding.name(for: identifier).value))
            }
            for (index, identifier) in identifiers.enumerated() {
                #expect(try await store.load(identifier: identifier)?.credentials?.accessToken == "t\(index)")
                #expect(
                    try await cache.lastRequest()["query"]?.hasPrefix("unique_id=u-") == true || identifier.count == 300
                )
            }
        }
    }

    @Test func theFixtureRefusesTraversalUniqueIDs() async throws {
        try await withTokenCache { cache in
            for query in ["unique_id=..%2F..%2Fetc%2Fpasswd", "unique_id=a%2Fb", "unique_id=..", "unique_id="] {
                let response = try await cache.rawFetch(query: query)
                #expect(response.status == false)
                #expect(response.errorCode == "30001", "\(query)")
            }
        }
    }

    @Test func clearingReadsBackAsNothingStored() async throws {
        try await withTokenCache { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            #expect(try await store.load(identifier: "never-saved") == nil)
            try await store.save(Self.session(id: "u", accessToken: "t"), identifier: "u")
            try await store.remove(identifier: "u")
            #expect(try await cache.lastRequest()["body"] == "unique_id=u-u&token_info=%7B%7D")
            #expect(try await store.load(identifier: "u") == nil)
            try await store.remove(identifier: "never-saved")
            #expect(try await store.load(identifier: "never-saved") == nil)
        }
    }

    @Test func currentIdentifierRoundTripsUnderTheReservedKey() async throws {
        try await withTokenCache { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            #expect(try await store.loadCurrentIdentifier() == nil)
            try await store.saveCurrentIdentifier("../someone else")
            #expect(try await cache.lastRequest()["body"]?.hasPrefix("unique_id=current-identifier&") == true)
            // A new instance (a restart) sees it, since it lives on the server.
            #expect(try await RemoteTokenStore(endpoint: cache.endpoint).loadCurrentIdentifier() == "../someone else")
            try await store.saveCurrentIdentifier(nil)
            #expect(try await store.loadCurrentIdentifier() == nil)

            let custom = try RemoteTokenStore(
                endpoint: cache.endpoint,
                configuration: .init(currentIdentifierKey: "app_2-current")
            )
            try await custom.saveCurrentIdentifier("x")
            #expect(try await cache.lastRequest()["body"]?.hasPrefix("unique_id=app_2-current&") == true)
            #expect(try await store.loadCurrentIdentifier() == nil)
            #expect(try await custom.loadCurrentIdentifier() == "x")
        }
    }

    @Test func listingIsNotSupportedByTheProtocol() async throws {
        let store = try RemoteTokenStore(endpoint: try #require(URL(string: "https://tokens.example.com/cache")))
        await #expect(throws: UserSessionError(.storeFailure, "")) { try await store.storedIdentifiers() }
    }

    @Test(arguments: ["30001", "50001", "50003"])
    func errorCodesAreTypedRejections(_ code: String) async throws {
        try await withTokenCache { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            try await cache.setMode("reject", code: code)
            let saveError = await #expect(throws: UserSessionError.self) {
                try await store.save(Self.session(id: "u", accessToken: "access-value"), identifier: "u")
            }
            #expect(saveError?.code == .remoteStoreRejected)
            #expect(saveError?.remoteErrorCode == code)
            #expect(saveError?.message.contains("rejected by the test") == true)
            let loadError = await #expect(throws: UserSessionError.self) { try await store.load(identifier: "u") }
            #expect(loadError?.code == .remoteStoreRejected)
            #expect(loadError?.remoteErrorCode == code)
            await #expect(throws: UserSessionError(.remoteStoreRejected, "")) {
                try await store.remove(identifier: "u")
            }
            await #expect(throws: UserSessionError(.remoteStoreRejected, "")) {
                try await store.loadCurrentIdentifier()
            }
        }
    }

    @Test func nothingStoredIsNilOnFetchButARejectionOnSave() async throws {
        try await withTokenCache { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            try await cache.setMode("reject", code: "50002")
            #expect(try await store.load(identifier: "u") == nil)
            #expect(try await store.loadCurrentIdentifier() == nil)
            let error = await #expect(throws: UserSessionError.self) {
                try await store.save(Self.session(id: "u", accessToken: "t"), identifier: "u")
            }
            #expect(error?.remoteErrorCode == "50002")
        }
    }

    @Test func aWriteFailureKeepsThePreviousValue() async throws {
        try await withTokenCache(arguments: ["--mode", "write-fail"]) { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            let error = await #expect(throws: UserSessionError.self) {
                try await store.save(Self.session(id: "u", accessToken: "t"), identifier: "u")
            }
            #expect(error?.code == .remoteStoreRejected)
            #expect(error?.remoteErrorCode == "50001")
            #expect(try await store.load(identifier: "u") == nil)
        }
    }

    @Test func rejectionMessagesNeverCarryTokens() async throws {
        try await withTokenCache(arguments: ["--mode", "echo-reject"]) { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            let session = Self.session(id: "u", accessToken: "access-SECRET-1", refreshToken: "refresh-SECRET-2")
            let error = await #expect(throws: UserSessionError.self) { try await store.save(session, identifier: "u") }
            #expect(error?.remoteErrorCode == "30001")
            let rendered = error.map { "\($0) \($0.message) \(String(reflecting: $0))" } ?? ""
            #expect(!rendered.contains("SECRET"))
            #expect(rendered.contains("withheld"))
        }
    }

    @Test(arguments: ["html", "http-500", "redirect"])
    func unusableResponsesAreTransportFailures(_ mode: String) async throws {
        try await withTokenCache { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            try await cache.setMode(mode)
            let loadError = await #expect(throws: UserSessionError.self) { try await store.load(identifier: "u") }
            #expect(loadError?.code == .transportFailure)
            let saveError = await #expect(throws: UserSessionError.self) {
                try await store.save(Self.session(id: "u", accessToken: "t"), identifier: "u")
            }
            #expect(saveError?.code == .transportFailure)
            // A redirect is refused, never followed (it could carry the tokens in the body elsewhere).
            #expect(try await cache.lastRequest()["redirected"] == "false")
        }
    }

    @Test func aServerThatIsDownIsATransportFailure() async throws {
        let refusing = try RefusingLoopbackPort()
        defer { withExtendedLifetime(refusing) {} }
        let store = try RemoteTokenStore(endpoint: refusing.url("/token_cache"))
        let error = await #expect(throws: UserSessionError.self) { try await store.load(identifier: "u") }
        #expect(error?.code == .transportFailure)
        #expect(error?.underlying != nil)
        await #expect(throws: UserSessionError(.transportFailure, "")) {
            try await store.save(Self.session(id: "u", accessToken: "t"), identifier: "u")
        }
    }

    @Test func aServerThatHangsTimesOut() async throws {
        try await withTokenCache(arguments: ["--mode", "hang"]) { cache in
            let store = try RemoteTokenStore(
                endpoint: cache.endpoint,
                configuration: .init(requestTimeout: .milliseconds(300))
            )
            await #expect(throws: UserSessionError(.transportFailure, "")) { try await store.load(identifier: "u") }
        }
    }

    @Test func cancellingTheCallerThrowsCancellationError() async throws {
        try await withTokenCache(arguments: ["--mode", "hang"]) { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            let task = Task { try await store.load(identifier: "u") }
            task.cancel()
            await #expect(throws: CancellationError.self) { try await task.value }
        }
    }

    @Test func unreadableTokenInfoIsCorruptAndForeignRecordsAreDetected() async throws {
        try await withTokenCache { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            // A record written by another identifier under the same (hashed) unique_id.
            let victim = String(repeating: "v", count: 300)
            let hashedKey = try IdentifierEncoding.name(for: victim).value
            #expect(hashedKey.hasPrefix("h-"))
            try await store.save(Self.session(id: "o", accessToken: "t"), identifier: "other")
            let tokenInfo = try #require(try await cache.rawFetch(query: "unique_id=u-other").tokenInfo)
            try await cache.postRaw(uniqueID: hashedKey, tokenInfo: tokenInfo)
            await #expect(throws: UserSessionError(.storeFailure, "")) { try await store.load(identifier: victim) }

            for garbage in [
                "not json", "[1]", #"{"user_info": 5}"#,
                #"{"user_info": {"id": "u", "attributes": {}}, "credentials": {"access_token": "a", "expires_at": "yesterday"}}"#,
            ] {
                try await cache.postRaw(uniqueID: "u-u", tokenInfo: garbage)
                let error = await #expect(throws: UserSessionError.self) { try await store.load(identifier: "u") }
                #expect(error?.code == .storeCorrupt, "\(garbage)")
            }
            try await cache.postRaw(
                uniqueID: "u-u",
                tokenInfo:
                    #"{"user_info": {"id": "u", "attributes": {}}, "credentials": {"version": 7, "access_token": "a"}}"#
            )
            await #expect(throws: UserSessionError(.unsupportedFormatVersion, "")) {
                try await store.load(identifier: "u")
            }
            try await cache.postRaw(uniqueID: "current-identifier", tokenInfo: #"{"current_identifier": ""}"#)
            await #expect(throws: UserSessionError(.storeCorrupt, "")) { try await store.loadCurrentIdentifier() }
        }
    }
}

struct RemoteTokenStoreEndpointTests {
    @Test(arguments: [
        "http://example.com/cache", "http://127.0.0.1.example.com/cache", "http://10.0.0.1/cache", "http://[::2]/cache",
        "http://localhost.example.com/cache", "ftp://127.0.0.1/cache", "file:///tmp/cache", "http://128.0.0.1/",
        "http://0.0.0.0/", "http://127.1/", "https:///nohost",
    ])
    func refusesEndpointsThatAreNotHTTPSOrLoopback(_ string: String) throws {
        let url = try #require(URL(string: string))
        let error = #expect(throws: UserSessionError.self) { try RemoteTokenStore(endpoint: url) }
        #expect(error?.code == .insecureEndpoint)
    }

    @Test(arguments: [
        "https://tokens.example.com/cache", "http://127.0.0.1:1/cache", "http://127.255.0.9/",
        "http://localhost:8080/x",
        "http://LOCALHOST/x", "http://[::1]:80/x", "http://[::ffff:127.0.0.1]/x", "HTTPS://Example.com/x",
    ])
    func acceptsHTTPSAndLoopbackHTTP(_ string: String) throws {
        let url = try #require(URL(string: string))
        #expect(throws: Never.self) { try RemoteTokenStore(endpoint: url) }
    }

    @Test(arguments: ["", "u-current", "h-x", "has space", "UPPER", "../x", String(repeating: "a", count: 201)])
    func refusesUnusableCurrentIdentifierKeys(_ key: String) throws {
        let url = try #require(URL(string: "https://tokens.example.com/cache"))
        let error = #expect(throws: UserSessionError.self) {
            try RemoteTokenStore(endpoint: url, configuration: .init(currentIdentifierKey: key))
        }
        #expect(error?.code == .invalidIdentifier)
    }

    @Test func percentEncodesEverythingButUnreservedCharacters() {
        #expect(FormURLEncoding.percentEncode("a b+c&d=e%f/é~._-AZ09") == "a%20b%2Bc%26d%3De%25f%2F%C3%A9~._-AZ09")
        #expect(FormURLEncoding.encode([("k y", "v=1"), ("x", "")]) == "k%20y=v%3D1&x=")
    }

    @Test func formatsDatesWithMillisecondsInUTC() throws {
        let session = StoredSession(
            userInfo: UserInfo(id: "u"),
            credentials: Credentials(accessToken: "a", expiresAt: Date(timeIntervalSince1970: 1_700_000_000.5))
        )
        let tokenInfo = try RemoteTokenCacheProtocol.encodeSession(session, identifier: "u")
        #expect(tokenInfo.contains(#""expires_at":"2023-11-14T22:13:20.500+0000""#))
        #expect(try RemoteTokenCacheProtocol.decodeSession(tokenInfo).session == session)
        #expect(try RemoteTokenCacheProtocol.decodeSession(tokenInfo).identifier == "u")
    }

    struct ResponseCase: Sendable, CustomTestStringConvertible {
        var body: String
        var expected: RemoteTokenCacheProtocol.Response?
        var testDescription: String { body }
    }

    @Test(arguments: [
        ResponseCase(body: #"{"status": "true"}"#, expected: .init(status: true)),
        ResponseCase(body: #"{"status": true, "token_info": "{}"}"#, expected: .init(status: true)),
        ResponseCase(body: #"{"status": "true", "token_info": " { } "}"#, expected: .init(status: true)),
        ResponseCase(body: #"{"status": "true", "token_info": ""}"#, expected: .init(status: true)),
        ResponseCase(body: #"{"status": "true", "token_info": null}"#, expected: .init(status: true)),
        ResponseCase(
            body: #"{"status": "true", "token_info": "{\"a\":1}"}"#,
            expected: .init(status: true, tokenInfo: #"{"a":1}"#)),
        ResponseCase(
            body: #"{"status": "true", "token_info": {"a": 1}}"#, expected: .init(status: true, tokenInfo: #"{"a":1}"#)),
        ResponseCase(
            body: #"{"status": "false", "errorCode": 50002, "errorMessage": "none"}"#,
            expected: .init(status: false, errorCode: "50002", errorMessage: "none")
        ),
        ResponseCase(
            body: #"{"status": "false", "errorCode": "30001"}"#, expected: .init(status: false, errorCode: "30001")),
        ResponseCase(body: "<html><body>oops</body></html>", expected: nil),
        ResponseCase(body: "", expected: nil),
        ResponseCase(body: "[]", expected: nil),
        ResponseCase(body: #"{"status": "maybe"}"#, expected: nil),
        ResponseCase(body: #"{"status": 1}"#, expected: nil),
        ResponseCase(body: #"{"token_info": "x"}"#, expected: nil),
    ])
    func parsesResponses(_ responseCase: ResponseCase) throws {
        let data = Data(responseCase.body.utf8)
        if let expected = responseCase.expected {
            #expect(try RemoteTokenCacheProtocol.parseResponse(data) == expected)
        } else {
            let error = #expect(throws: UserSessionError.self) { try RemoteTokenCacheProtocol.parseResponse(data) }
            #expect(error?.code == .transportFailure)
        }
    }
}
