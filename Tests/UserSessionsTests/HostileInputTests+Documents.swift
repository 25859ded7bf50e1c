import Foundation
import Testing

@testable import UserSessions

/// Hostile JSON documents: sign-in responses, token files, remote responses, duplicate members.
extension HostileInputTests {
    // MARK: - JSON

    /// 100,000 levels of arrays, then of objects.
    static let deepArrays = Data((String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)).utf8)
    static let deepObjects = Data(
        (String(repeating: "{\"a\":", count: 100_000) + "1" + String(repeating: "}", count: 100_000)).utf8)

    /// A 50 MB body that never closes its string.
    static let hugeUnterminated: Data = {
        var data = Data(#"{"result": {"user": {"id": ""#.utf8)
        data.append(Data(repeating: UInt8(ascii: "a"), count: 50 * 1024 * 1024))
        return data
    }()

    /// A 50 MB body of valid JSON: a top-level array, which no parser here accepts.
    static let hugeArray: Data = {
        var data = Data("[\"".utf8)
        data.append(Data(repeating: UInt8(ascii: "a"), count: 50 * 1024 * 1024))
        data.append(Data("\"]".utf8))
        return data
    }()

    static let signInCases: [(name: String, body: String, path: String?)] = [
        ("wrong type: id is a boolean", #"{"result": {"user": {"id": true}}}"#, "result.user.id"),
        ("wrong type: result is an array", #"{"result": []}"#, "result"),
        (
            "wrong type: access_token is a number", #"{"result": {"user": {"id": "u"}, "access_token": 5}}"#,
            "result.access_token"
        ),
        (
            "wrong type: expires_in is an object",
            #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": {}}}"#, "result.expires_in"
        ),
        (
            "wrong type: scope is a number", #"{"result": {"user": {"id": "u"}, "access_token": "a", "scope": 1}}"#,
            "result.scope"
        ),
        (
            "negative expires_in", #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": -1}}"#,
            "result.expires_in"
        ),
        (
            "negative expires_in as a string",
            #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": "-0.5"}}"#, "result.expires_in"
        ),
        (
            "huge expires_in", #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": 1e308}}"#,
            "result.expires_in"
        ),
        (
            "expires_in past Int64",
            #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": 9223372036854775808}}"#,
            "result.expires_in"
        ),
        (
            "expires_in past Double", #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": 1e999}}"#,
            nil
        ),
        (
            "expires_in as a huge string",
            #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": "99999999999999999999999"}}"#,
            "result.expires_in"
        ),
        (
            "expires_in as nan", #"{"result": {"user": {"id": "u"}, "access_token": "a", "expires_in": "nan"}}"#,
            "result.expires_in"
        ),
        ("a lone surrogate escape", #"{"result": {"user": {"id": "\ud800"}}}"#, nil),
    ]

    @Test func hostileSignInResponsesAreMalformedSignInResponseErrors() {
        var bodies: [(String, Data, String?)] = Self.signInCases.map { ($0.name, Data($0.body.utf8), $0.path) }
        bodies += [
            ("100,000 nested arrays", Self.deepArrays, nil), ("100,000 nested objects", Self.deepObjects, nil),
            ("50 MB unterminated string", Self.hugeUnterminated, nil), ("50 MB array", Self.hugeArray, nil),
        ]
        for (name, body, path) in bodies {
            do {
                let prototype = try UserSessionPrototype(signInResponse: body)
                Issue.record("\(name): parsed into \(prototype.identifier.prefix(20))")
            } catch let error as UserSessionError {
                #expect(error.code == .malformedSignInResponse, "\(name)")
                if let path { #expect(error.jsonPath == path, "\(name)") }
            } catch {
                Issue.record("\(name): untyped \(type(of: error))")
            }
        }
    }

    static let tokenFileCases: [(name: String, body: String)] = [
        ("format is a number", #"{"format": 5, "version": 1, "identifier": "u"}"#),
        ("version is a string", #"{"format": "swift-user-sessions.token", "version": "1", "identifier": "u"}"#),
        ("version is negative", #"{"format": "swift-user-sessions.token", "version": -1, "identifier": "u"}"#),
        (
            "version past Int64",
            #"{"format": "swift-user-sessions.token", "version": 99999999999999999999, "identifier": "u"}"#
        ),
        ("identifier is a number", #"{"format": "swift-user-sessions.token", "version": 1, "identifier": 7}"#),
        (
            "session is a string",
            #"{"format": "swift-user-sessions.token", "version": 1, "identifier": "u", "session": "x"}"#
        ),
        (
            "access token is a number",
            #"{"format":"swift-user-sessions.token","version":1,"identifier":"u","session":{"user_info":{"id":"u","attributes":{}},"credentials":{"access_token":1}}}"#
        ),
        (
            "expiry is a string",
            #"{"format":"swift-user-sessions.token","version":1,"identifier":"u","session":{"user_info":{"id":"u","attributes":{}},"credentials":{"access_token":"a","expires_at":"soon"}}}"#
        ),
        ("no session", #"{"format": "swift-user-sessions.token", "version": 1, "identifier": "u"}"#),
        (
            "another identifier",
            #"{"format":"swift-user-sessions.token","version":1,"identifier":"v","session":{"user_info":{"id":"u","attributes":{}}}}"#
        ),
        ("empty", ""), ("truncated", #"{"format":"swift-user-sessions.token","vers"#), ("NUL bytes", "\u{0}\u{0}"),
    ]

    @Test func hostileTokenFilesAreStoreCorruptErrors() async throws {
        let (root, store) = Self.makeFileStore()
        defer { try? FileManager.default.removeItem(at: root) }
        try await store.save(Self.session("u", index: 0), identifier: "u")  // creates the directory
        let file = store.directory.appending(path: try IdentifierEncoding.name(for: "u").value + ".json")
        var bodies: [(String, Data)] = Self.tokenFileCases.map { ($0.name, Data($0.body.utf8)) }
        bodies += [
            ("100,000 nested arrays", Self.deepArrays), ("100,000 nested objects", Self.deepObjects),
            ("50 MB unterminated string", Self.hugeUnterminated), ("50 MB array", Self.hugeArray),
        ]
        for (name, body) in bodies {
            try body.write(to: file)
            await Self.expectCode(.storeCorrupt, name) { _ = try await store.load(identifier: "u") }
            // The corrupt file is kept for inspection.
            #expect(try Data(contentsOf: file) == body, "\(name)")
        }
        // The same bytes as a current-identifier file.
        let current = store.directory.appending(path: FileTokenStore.currentIdentifierFileName)
        for (name, body) in bodies {
            try body.write(to: current)
            await Self.expectCode(.storeCorrupt, name) { _ = try await store.loadCurrentIdentifier() }
        }
    }

    static let remoteResponseCases: [(name: String, body: String)] = [
        ("status is a number", #"{"status": 1}"#), ("status is yes", #"{"status": "yes"}"#),
        ("no status", #"{"token_info": "{}"}"#), ("an array", #"["status", "true"]"#),
        ("a bare string", #""true""#),
    ]

    static let tokenInfoCases: [(name: String, body: String)] = [
        ("token_info is not JSON", "not json"), ("token_info is an array", "[1, 2]"),
        (
            "access token is a number",
            #"{"user_info": {"id": "u", "attributes": {}}, "credentials": {"access_token": 1}}"#
        ),
        (
            "date in another format",
            #"{"user_info": {"id": "u", "attributes": {}}, "credentials": {"access_token": "a", "expires_at": "1700000000"}}"#
        ),
        (
            "date out of range",
            #"{"user_info": {"id": "u", "attributes": {}}, "credentials": {"access_token": "a", "expires_at": "9999-99-99T99:99:99.999+9999"}}"#
        ),
    ]

    @Test func hostileRemoteResponsesAreTypedErrorsWithoutTheNetwork() {
        var responses: [(String, Data)] = Self.remoteResponseCases.map { ($0.name, Data($0.body.utf8)) }
        responses += [
            ("100,000 nested arrays", Self.deepArrays), ("100,000 nested objects", Self.deepObjects),
            ("50 MB unterminated string", Self.hugeUnterminated), ("50 MB array", Self.hugeArray),
            ("an HTML page", Data("<html><body>Maintenance</body></html>".utf8)),
            ("a truncated body", Data(#"{"status": "true", "token_in"#.utf8)),
        ]
        for (name, body) in responses {
            Self.expectCodeNow(.transportFailure, name) { _ = try RemoteTokenCacheProtocol.parseResponse(body) }
        }
        var tokenInfos = Self.tokenInfoCases.map { ($0.name, $0.body) }
        tokenInfos += [
            ("100,000 nested arrays", String(decoding: Self.deepArrays, as: UTF8.self)),
            ("100,000 nested objects", String(decoding: Self.deepObjects, as: UTF8.self)),
        ]
        for (name, tokenInfo) in tokenInfos {
            Self.expectCodeNow(.storeCorrupt, name) { _ = try RemoteTokenCacheProtocol.decodeSession(tokenInfo) }
            Self.expectCodeNow(.storeCorrupt, name) {
                _ = try RemoteTokenCacheProtocol.decodeCurrentIdentifier(tokenInfo)
            }
        }
    }

    /// A 9 MiB access token (a sign-in response accepts it) makes a session larger than the 8 MiB the file store
    /// reads back: the save is refused, so the failure shows when it happens, and nothing is written.
    @Test func aSessionTooLargeToReadBackIsRefusedWhenSaved() async throws {
        let (root, store) = Self.makeFileStore()
        defer { try? FileManager.default.removeItem(at: root) }
        let token = String(repeating: "t", count: 9 * 1024 * 1024)
        let body = #"{"result": {"user": {"id": "big"}, "access_token": ""# + token + #""}}"#
        let prototype = try UserSessionPrototype(signInResponse: Data(body.utf8))
        let session = StoredSession(userInfo: prototype.userInfo, credentials: prototype.credentials)
        // An earlier, small session under the same identifier survives the refused save.
        let small = Self.session("big", index: 1)
        try await store.save(small, identifier: "big")
        await Self.expectCode(.storeFailure, "save") { try await store.save(session, identifier: "big") }
        #expect(try await store.load(identifier: "big") == small)
        let names = try FileManager.default.contentsOfDirectory(atPath: store.directory.path(percentEncoded: false))
        #expect(names.count == 1, "\(names)")
        // Just under the limit is still written and read back.
        let fitting = String(repeating: "t", count: FileTokenStore.maximumFileSize - 4096)
        let fits = StoredSession(userInfo: UserInfo(id: "big"), credentials: Credentials(accessToken: fitting))
        try await store.save(fits, identifier: "big")
        #expect(try await store.load(identifier: "big") == fits)
    }

    @Test func duplicateMembersAreTypedErrors() {
        do {
            _ = try UserSessionPrototype(signInResponse: Data(#"{"result": {"user": {"id": "u", "id": 1.5}}}"#.utf8))
            Issue.record("sign-in: parsed")
        } catch let error as UserSessionError {
            #expect(error.code == .malformedSignInResponse)
            #expect(error.jsonPath == "result.user.id")
        } catch {
            Issue.record("sign-in: untyped \(type(of: error))")
        }
        let signIns = [
            #"{"result": {"user": {"id": "u"}, "access_token": "a", "\u0061ccess_token": "b"}}"#,
            #"{"result": {"user": {"id": "u"}}, "result": {"user": {"id": "v"}}}"#,
            #"{"result": {"user": {"id": "u", "caf\u00e9": "x", "cafe\u0301": "y"}}}"#,
        ]
        for body in signIns {
            Self.expectCodeNow(.malformedSignInResponse, body) {
                _ = try UserSessionPrototype(signInResponse: Data(body.utf8))
            }
        }
        Self.expectCodeNow(.transportFailure, "remote response") {
            _ = try RemoteTokenCacheProtocol.parseResponse(Data(#"{"status": "true", "status": 1}"#.utf8))
        }
        Self.expectCodeNow(.transportFailure, "remote response, nested") {
            _ = try RemoteTokenCacheProtocol.parseResponse(
                Data(#"{"status": "true", "token_info": {"a": 1, "a": 2}}"#.utf8))
        }
        Self.expectCodeNow(.storeCorrupt, "token_info") {
            _ = try RemoteTokenCacheProtocol.decodeSession(
                #"{"user_info": {"id": "u", "attributes": {}}, "user_info": 5}"#)
        }
        Self.expectCodeNow(.storeCorrupt, "current identifier token_info") {
            _ = try RemoteTokenCacheProtocol.decodeCurrentIdentifier(
                #"{"current_identifier": "u", "current_identifier": "v"}"#)
        }
        Self.expectCodeNow(.storeCorrupt, "token file") {
            let file =
                #"{"format":"swift-user-sessions.token","format":1,"version":1,"identifier":"u","#
                + #""session":{"user_info":{"id":"u","attributes":{}}}}"#
            _ = try TokenFileCoding.decode(Array(file.utf8), format: FileTokenStore.tokenFileFormat, file: "f")
        }
        Self.expectCodeNow(.storeCorrupt, "token file, credentials") {
            let file =
                #"{"format":"swift-user-sessions.token","version":1,"identifier":"u","session":{"user_info":"#
                + #"{"id":"u","attributes":{}},"credentials":{"access_token":"a","access_token":"b"}}}"#
            _ = try TokenFileCoding.decode(Array(file.utf8), format: FileTokenStore.tokenFileFormat, file: "f")
        }
        let previous = Credentials(accessToken: "at-old", refreshToken: "rt-old")
        for body in [
            #"{"access_token": "a", "access_token": "b", "token_type": "Bearer"}"#,
            #"{"access_token": "a", "refresh_token": "r1", "refresh_token": "r2"}"#,
            #"{"access_token": "a", "\u0065xpires_in": 10, "expires_in": 3600}"#,
        ] {
            Self.expectCodeNow(.malformedTokenResponse, body) {
                _ = try OAuth2TokenResponse.credentials(
                    status: 200, body: Data(body.utf8), previous: previous, sentAt: Date(), secrets: [])
            }
        }
        // An error body with two codes is never read as invalid_grant (which would end the session).
        do {
            _ = try OAuth2TokenResponse.credentials(
                status: 400, body: Data(#"{"error": "invalid_grant", "error": "invalid_request"}"#.utf8),
                previous: previous, sentAt: Date(), secrets: [])
            Issue.record("an error body parsed into credentials")
        } catch let error as UserSessionError {
            #expect(error.code == .malformedTokenResponse)
            #expect(error.failureClass == .misconfiguration)
        } catch {
            Issue.record("untyped \(type(of: error))")
        }
    }
}
