import Foundation
import Testing

@testable import UserSessions

/// Renders every public value, event and error the package can produce through every way Swift turns a value into
/// text, and checks that no access token, refresh token or secret appears in any of them.
///
/// That includes `OAuth2TokenRefresher` with each kind of client authentication holding ``otherSecret`` as the
/// client secret, the errors of real failing refreshes against the OAuth fixture (`invalid_client`, and an
/// `invalid_grant` whose description echoes the refresh token), and the events of real refreshes
/// (`refreshStarted`, `credentialsRefreshed`, `persistenceFailed`, `refreshFailed`, `invalidated`), with the tokens
/// the fixture issued as the secrets to look for.
struct SecretsTests {
    static let accessToken = "at-SECRET-7f3c9e1d"
    static let refreshToken = "rt-SECRET-b2a4d6f8"
    static let otherSecret = "cs-SECRET-0c1e5a77"
    static let idToken = "eyJ-it-SECRET-5d9e03aa"
    static let secrets = [accessToken, refreshToken, otherSecret, idToken]

    static let credentials = Credentials(
        accessToken: accessToken,
        refreshToken: refreshToken,
        tokenType: "Bearer",
        expiresAt: Date(timeIntervalSince1970: 2_000_000_000),
        lastRefreshedAt: Date(timeIntervalSince1970: 1_999_996_400),
        source: .signIn,
        grantedPermissions: ["email", "profile"],
        declinedPermissions: ["photos"],
        idToken: idToken
    )
    static let userInfo = UserInfo(id: "user-1", email: "user@example.com", name: "User One", attributes: ["a": "b"])
    static let storedSession = StoredSession(userInfo: userInfo, credentials: credentials)
    static let prototype = UserSessionPrototype(userInfo: userInfo, credentials: credentials)

    /// An error type of the user's that prints a secret: it may travel as an `underlying` error.
    struct LeakyError: Error, CustomStringConvertible {
        var token: String
        var description: String { "LeakyError(token: \(token))" }
    }

    static let allCodes: [UserSessionError.Code] = [
        .invalidPrototype, .malformedSignInResponse, .invalidIdentifier, .wrongState, .sessionNotOpen,
        .openRolledBack, .shutdown, .serviceStartFailed, .noStoredSession, .credentialsUnusable, .storeCorrupt,
        .storeFailure, .unsupportedFormatVersion, .remoteStoreRejected, .transportFailure, .insecureEndpoint,
        .noRefresher, .refreshFailed, .refreshLoop, .malformedTokenResponse,
    ]

    /// Every way a value becomes text, by name.
    static func renderings<Value>(of value: Value) -> [(String, String)] {
        var dumped = ""
        dump(value, to: &dumped)
        var printed = ""
        print(value, to: &printed)
        var debugPrinted = ""
        debugPrint(value, to: &debugPrinted)
        var result: [(String, String)] = [
            ("String(describing:)", String(describing: value)), ("String(reflecting:)", String(reflecting: value)),
            ("interpolation", "\(value)"), ("dump", dumped), ("print", printed), ("debugPrint", debugPrinted),
            ("Mirror", deepMirror(of: value)),
        ]
        if let value = value as? any CustomStringConvertible { result.append(("description", value.description)) }
        if let value = value as? any CustomDebugStringConvertible {
            result.append(("debugDescription", value.debugDescription))
        }
        if let error = value as? any Error {
            result.append(("localizedDescription", error.localizedDescription))
            result.append(("as NSError", String(describing: error as NSError)))
        }
        return result
    }

    /// Every child label and leaf value the mirror exposes, to a bounded depth (what a generic logger would walk).
    static func deepMirror(of value: Any, depth: Int = 0) -> String {
        guard depth < 12 else { return "" }
        let mirror = Mirror(reflecting: value)
        guard !mirror.children.isEmpty else { return String(describing: value) }
        return mirror.children.map { child in
            "\(child.label ?? "_")=\(deepMirror(of: child.value, depth: depth + 1))"
        }.joined(separator: ";")
    }

    static func expectNoSecrets<Value>(
        in value: Value,
        _ name: String,
        also extraSecrets: [String] = [],
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        for (way, text) in renderings(of: value) {
            for secret in secrets + extraSecrets where text.contains(secret) {
                Issue.record(
                    "\(name) shows a secret through \(way): \(text.prefix(300))", sourceLocation: sourceLocation)
            }
        }
    }

    @Test func renderingsCanSeeASecretWhenOneIsThere() {
        // The check itself works: a plain value holding a secret is caught by every rendering.
        let leaky = LeakyError(token: Self.accessToken)
        #expect(Self.renderings(of: leaky).filter { $0.1.contains(Self.accessToken) }.count >= 6)
        let plain = ["token": Self.refreshToken]
        #expect(Self.renderings(of: plain).allSatisfy { $0.1.contains(Self.refreshToken) })
    }

    @Test func modelValuesNeverShowSecrets() {
        Self.expectNoSecrets(in: Self.credentials, "Credentials")
        Self.expectNoSecrets(in: Optional(Self.credentials), "Credentials?")
        Self.expectNoSecrets(in: [Self.credentials], "[Credentials]")
        Self.expectNoSecrets(in: ["k": Self.credentials], "[String: Credentials]")
        Self.expectNoSecrets(in: Self.storedSession, "StoredSession")
        Self.expectNoSecrets(in: Optional(Self.storedSession), "StoredSession?")
        Self.expectNoSecrets(in: ["user-1": Self.storedSession], "[String: StoredSession]")
        Self.expectNoSecrets(in: Self.prototype, "UserSessionPrototype")
        Self.expectNoSecrets(in: Self.userInfo, "UserInfo")
        Self.expectNoSecrets(in: UserSession(identifier: "user-1", state: .opened, userInfo: Self.userInfo), "session")
        Self.expectNoSecrets(in: (Self.credentials, Self.storedSession), "a tuple")
        Self.expectNoSecrets(in: Result<Credentials, LeakyError>.success(Self.credentials), "Result")
    }

    /// Every event kind, each carrying the detail the package writes for it when its cause holds secrets: a store
    /// error that prints a token, a token endpoint that echoes the refresh token, a service whose error prints one.
    @Test func everyEventKindNeverShowsSecretsEvenWhenItsCauseHoldsThem() async throws {
        let session = UserSession(identifier: "user-1", state: .opened, userInfo: Self.userInfo)
        let leakyStore = LeakyError(token: Self.accessToken)
        let persistDetails = [
            RefreshStateMachine.describePersistFailure(leakyStore),
            RefreshStateMachine.describePersistFailure(
                UserSessionError(.storeFailure, "save failed", underlying: leakyStore)),
        ]
        // What a refresh failure's event says: the message of the error parsed from an echoing endpoint.
        let echo = #"{"error": "invalid_grant", "error_description": "\#(Self.refreshToken) was reused"}"#
        var refreshDetail = ""
        do {
            _ = try OAuth2TokenResponse.credentials(
                status: 400, body: Data(echo.utf8), previous: Self.credentials, sentAt: Date(),
                secrets: [Self.accessToken, Self.refreshToken])
        } catch let error as UserSessionError {
            refreshDetail = error.message
        }
        #expect(refreshDetail.contains("invalid_grant"))

        var events: [UserSessionEvent] = []
        func add(_ kind: UserSessionEvent.Kind, _ detail: String? = nil) {
            events.append(
                UserSessionEvent(kind: kind, session: session, sequence: UInt64(events.count), detail: detail))
        }
        for kind: UserSessionEvent.Kind in [
            .current, .opened, .closed(.requested), .closed(.cleared), .closed(.replaced), .closed(.rolledBack),
            .closed(.shutdown), .invalidated(.credentialsRevoked), .invalidated(.credentialsExpired), .refreshStarted,
            .credentialsRefreshed, .credentialsUpdated(.init(extended: true, addedPermissions: ["a"])),
            .storeCorrupt(identifier: "user-1"), .serviceStopOverran(service: "s"),
        ] {
            add(kind)
        }
        for detail in persistDetails { add(.persistenceFailed, detail) }
        for failureClass: RefreshFailureClass in [.terminal, .misconfiguration, .transient, .cancelled] {
            add(.refreshFailed(failureClass), refreshDetail)
        }
        add(.refreshLoopTripped, refreshDetail)
        // What a failed revocation's event says when the refresher's error prints the token it was revoking.
        let revocationDetails = [
            SignOutRevocation.failure(leakyStore, secrets: [Self.accessToken, Self.refreshToken]),
            SignOutRevocation.failure(
                UserSessionError(.revocationFailed, "revoke \(Self.refreshToken) refused"),
                secrets: [Self.accessToken, Self.refreshToken]),
        ]
        for failure in revocationDetails { add(.revocationFailed(failure.failureClass), failure.detail) }

        // A service whose start fails with an error that prints the access token: the real events of that open.
        var service = RecordingService("s", log: ServiceLog())
        service.startFailure = leakyStore
        let controller = UserSessionController(store: InMemoryTokenStore(), services: [service])
        let probe = EventProbe(controller)
        await #expect(throws: UserSessionError.self) { try await controller.open(Self.prototype) }
        await probe.wait(for: .invalidated(.serviceStartFailed(service: "s")))
        let started = probe.events.filter { $0.kind != .current }
        #expect(started.contains { $0.kind == .serviceStartFailed(service: "s") })
        events += started
        await controller.shutdown()

        // The check bites: the same events, with the raw cause as their detail, are caught.
        for event in events where event.detail != nil {
            var raw = event
            raw.detail = String(describing: leakyStore) + " " + Self.refreshToken
            #expect(Self.renderings(of: raw).contains { $0.1.contains(Self.accessToken) })
        }
        for event in events {
            Self.expectNoSecrets(in: event, "\(event.kind)")
            Self.expectNoSecrets(in: event.kind, "kind \(event.kind)")
        }
    }

    @Test func everyErrorCodeNeverShowsSecretsEvenWithALeakyUnderlyingError() {
        let decodingError = DecodingError.dataCorrupted(
            .init(codingPath: [], debugDescription: "bad token \(Self.accessToken)"))
        for code in Self.allCodes {
            Self.expectNoSecrets(in: UserSessionError(code, "plain message"), "\(code)")
            let error = UserSessionError(
                code, "with causes", failureClass: .transient, serviceName: "svc", jsonPath: "result.token",
                remoteErrorCode: "50001", underlying: LeakyError(token: Self.refreshToken))
            Self.expectNoSecrets(in: error, "\(code) with a leaky underlying error")
            Self.expectNoSecrets(in: error as any Error, "\(code) as any Error")
            Self.expectNoSecrets(
                in: UserSessionError(code, "decoding", underlying: decodingError), "\(code) over a DecodingError")
        }
    }

    @Test func errorsFromRealParsesOfSecretBearingInputNeverShowThem() throws {
        let at = Self.accessToken
        let rt = Self.refreshToken
        let signIns = [
            #"{"result": {"user": {"id": "u"}, "access_token": "\#(at)", "refresh_token": "\#(rt)", "expires_in": "\#(at)"}}"#,
            #"{"result": {"user": {"id": "u"}, "access_token": "\#(at)", "refresh_token": 5, "scope": ["\#(rt)", 1]}}"#,
            #"{"result": {"user": {"id": "\#(at)\u0000"}, "access_token": "\#(rt)"}}"#,
            #"{"result": {"user": {"id": "u"}, "token": "\#(at)"}}"#,
            #"{"\#(at)": "\#(rt)""#,
        ]
        for body in signIns {
            do {
                _ = try UserSessionPrototype(signInResponse: Data(body.utf8))
                Issue.record("parsed \(body.prefix(40))")
            } catch {
                Self.expectNoSecrets(in: error, "sign-in error")
            }
        }
        let files = [
            #"{"format":"swift-user-sessions.token","version":1,"identifier":"u","session":{"user_info":{"id":"u","attributes":{}},"credentials":{"access_token":"\#(at)","refresh_token":"\#(rt)","expires_at":"\#(at)"}}}"#,
            #"{"format":"swift-user-sessions.token","version":1,"identifier":"u","session":{"user_info":{"id":"u","attributes":{}},"credentials":{"access_token":"\#(at)","version":"\#(rt)"}}}"#,
            #"{"format":"\#(at)","version":1}"#,
        ]
        for file in files {
            do {
                _ = try TokenFileCoding.decode(Array(file.utf8), format: FileTokenStore.tokenFileFormat, file: "f")
                Issue.record("decoded \(file.prefix(40))")
            } catch {
                Self.expectNoSecrets(in: error, "token file error")
            }
        }
        let tokenInfos = [
            #"{"user_info":{"id":"u","attributes":{}},"credentials":{"access_token":"\#(at)","expires_at":"\#(rt)"}}"#,
            #"{"current_identifier": 1, "x": "\#(at)"}"#,
        ]
        for tokenInfo in tokenInfos {
            do {
                _ = try RemoteTokenCacheProtocol.decodeSession(tokenInfo)
                Issue.record("decoded \(tokenInfo.prefix(40))")
            } catch {
                Self.expectNoSecrets(in: error, "token_info error")
            }
        }
    }

    @Test func storesHoldingSecretsNeverShowThem() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "secrets-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let fileStore = FileTokenStore(directory: directory)
        try await fileStore.save(Self.storedSession, identifier: "user-1")
        Self.expectNoSecrets(in: fileStore, "FileTokenStore")
        let memoryStore = InMemoryTokenStore()
        try await memoryStore.save(Self.storedSession, identifier: "user-1")
        Self.expectNoSecrets(in: memoryStore, "InMemoryTokenStore")
        let remote = try RemoteTokenStore(endpoint: try #require(URL(string: "https://tokens.example.com/cache")))
        Self.expectNoSecrets(in: remote, "RemoteTokenStore")
        Self.expectNoSecrets(in: remote.configuration, "RemoteTokenStore.Configuration")
    }

    @Test func aControllerItsEventsAndItsRegistryNeverShowSecrets() async throws {
        let store = InMemoryTokenStore()
        let controller = UserSessionController(store: store)
        let events = controller.events(bufferSize: 64)
        let session = try await controller.open(Self.prototype)
        Self.expectNoSecrets(in: session, "the opened session")
        Self.expectNoSecrets(in: controller.credentials, "controller.credentials")
        Self.expectNoSecrets(in: controller, "UserSessionController")
        Self.expectNoSecrets(in: controller.configuration, "Configuration")
        await controller.close()
        _ = try await controller.restore(identifier: "user-1")
        try await controller.closeAndClear()
        await controller.shutdown()
        var count = 0
        for await event in events {
            Self.expectNoSecrets(in: event, "event \(event.kind)")
            Self.expectNoSecrets(in: event.kind, "event kind \(event.kind)")
            count += 1
        }
        #expect(count >= 5)

        let registry = UserSessionRegistry(store: store)
        let opened = try await registry.open(Self.prototype)
        Self.expectNoSecrets(in: registry, "UserSessionRegistry")
        Self.expectNoSecrets(in: opened, "a registry's controller")
        await registry.shutdown()
    }

    @Test func tokenFilesArePrivateAndTheirDirectoryToo() async throws {
        let root = FileManager.default.temporaryDirectory.appending(path: "secrets-modes-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let directory = root.appending(path: "a/b/tokens", directoryHint: .isDirectory)
        let store = FileTokenStore(directory: directory)
        try await store.save(Self.storedSession, identifier: "user-1")
        try await store.saveCurrentIdentifier("user-1")
        func mode(_ url: URL) throws -> Int {
            let attributes = try FileManager.default.attributesOfItem(atPath: url.path(percentEncoded: false))
            return (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
        }
        #expect(try mode(directory) == 0o700)
        #expect(try mode(root.appending(path: "a/b")) == 0o700)
        let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
        #expect(files.count == 2)
        for file in files { #expect(try mode(file) == 0o600, "\(file.lastPathComponent)") }
        // And the secrets are there, only there: the file is the one place they are meant to be.
        let bytes = try Data(contentsOf: try #require(files.first { $0.lastPathComponent.hasPrefix("u-") }))
        #expect(String(decoding: bytes, as: UTF8.self).contains(Self.accessToken))
    }
}
