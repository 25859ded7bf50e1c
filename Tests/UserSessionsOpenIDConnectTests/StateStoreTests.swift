#if OpenIDConnect
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

/// What every ``OpenIDConnectStateStore`` must do; run against the in-memory, file and PostgreSQL stores.
enum StateStoreConformance {
    static let redirect = URL(fileURLWithPath: "/callback")

    static func pending(_ state: String, now: Date, lifetime: TimeInterval = 600) -> PendingSignIn {
        PendingSignIn(
            state: state, nonce: "n-" + state, codeVerifier: "v-" + state, redirectURI: redirect,
            maximumAuthenticationAge: 60, context: ["to": "/x"], createdAt: now,
            expiresAt: now.addingTimeInterval(lifetime))
    }

    static func check(_ store: any OpenIDConnectStateStore) async throws {
        let now = Date(timeIntervalSince1970: 2_000_000_000)
        // Single use: the second take finds nothing.
        try await store.insert(pending("s1", now: now), limit: 3, now: now)
        #expect(try await store.take(state: "s1", now: now) == pending("s1", now: now))
        #expect(try await store.take(state: "s1", now: now) == nil)
        #expect(try await store.take(state: "never", now: now) == nil)
        // Expiry: an expired pending sign-in is not handed out, and does not count against the bound.
        try await store.insert(pending("old", now: now, lifetime: 10), limit: 3, now: now)
        #expect(try await store.take(state: "old", now: now.addingTimeInterval(11)) == nil)
        try await store.insert(pending("e", now: now, lifetime: 10), limit: 3, now: now)
        try await store.insert(pending("a", now: now), limit: 3, now: now)
        try await store.insert(pending("b", now: now), limit: 3, now: now)
        // A full store never refuses a new one: the one that expires first makes room.
        try await store.insert(pending("c", now: now), limit: 3, now: now)
        #expect(try await store.take(state: "e", now: now) == nil, "the oldest was dropped")
        #expect(try await store.take(state: "a", now: now) == pending("a", now: now))
        #expect(try await store.take(state: "c", now: now) == pending("c", now: now))
        try await store.insert(pending("d", now: now + 1), limit: 3, now: now)
        try await store.insert(pending("f", now: now + 2), limit: 3, now: now)
        try await store.insert(pending("g", now: now + 3), limit: 3, now: now)
        #expect(try await store.take(state: "b", now: now) == nil, "b expires first")
        #expect(try await store.take(state: "d", now: now) == pending("d", now: now + 1))
        // Concurrent takes of one state: exactly one wins.
        try await store.insert(pending("race", now: now), limit: 10, now: now)
        let winners = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<8 { group.addTask { try await store.take(state: "race", now: now) != nil } }
            return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(winners == 1)

        // Sign-in records, found by sid or sub, per issuer, and forgotten.
        let issuer = "https://issuer.example"
        try await store.record(
            OpenIDSignInRecord(identifier: "u1", issuer: issuer, subject: "sub1", sessionID: "sid1", signedInAt: now))
        try await store.record(
            OpenIDSignInRecord(identifier: "u2", issuer: issuer, subject: "sub1", sessionID: "sid2", signedInAt: now))
        try await store.record(
            OpenIDSignInRecord(
                identifier: "u3", issuer: "https://other", subject: "sub1", sessionID: "sid1",
                signedInAt: now))
        #expect(try await store.records(issuer: issuer, subject: nil, sessionID: "sid1").map(\.identifier) == ["u1"])
        #expect(
            Set(try await store.records(issuer: issuer, subject: "sub1", sessionID: nil).map(\.identifier))
                == ["u1", "u2"])
        #expect(try await store.records(issuer: issuer, subject: "sub2", sessionID: "sid1").isEmpty)
        #expect(try await store.records(issuer: issuer, subject: nil, sessionID: nil).isEmpty)
        try await store.forget(identifier: "u1", issuer: issuer)
        #expect(try await store.records(issuer: issuer, subject: nil, sessionID: "sid1").isEmpty)
        try await store.forget(identifier: "u1", issuer: issuer)

        // Logout token ids: remembered until their expiry, per issuer.
        #expect(try await store.remember(logoutTokenID: "j1", issuer: issuer, until: now + 60, now: now))
        #expect(try await store.remember(logoutTokenID: "j1", issuer: issuer, until: now + 60, now: now + 30) == false)
        #expect(try await store.remember(logoutTokenID: "j1", issuer: "https://other", until: now + 60, now: now))
        #expect(try await store.remember(logoutTokenID: "j1", issuer: issuer, until: now + 200, now: now + 61))
    }
}

struct StateStoreTests {
    @Test func theInMemoryStoreConforms() async throws {
        try await StateStoreConformance.check(InMemoryOpenIDConnectStateStore())
    }

    @Test func theFileStoreConformsAndKeepsItsFilesPrivate() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "oidc-state-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await StateStoreConformance.check(FileOpenIDConnectStateStore(directory: directory))
        let store = FileOpenIDConnectStateStore(directory: directory)
        let now = Date()
        try await store.insert(StateStoreConformance.pending("secret-state", now: now), limit: 10, now: now)
        let pending = directory.appending(path: "pending")
        let files = try FileManager.default.contentsOfDirectory(atPath: pending.path(percentEncoded: false))
        #expect(!files.contains { $0.contains("secret-state") }, "file names never show a state")
        for file in files {
            let attributes = try FileManager.default.attributesOfItem(
                atPath: pending.appending(path: file).path(percentEncoded: false))
            #expect((attributes[.posixPermissions] as? Int) == 0o600)
        }
        let folder = try FileManager.default.attributesOfItem(atPath: pending.path(percentEncoded: false))
        #expect((folder[.posixPermissions] as? Int) == 0o700)
    }

    @Test(arguments: PlantedFile.allCases)
    func aPlantedPendingSignInFileIsATypedErrorNeverFollowed(_ kind: PlantedFile) async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "oidc-state-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = FileOpenIDConnectStateStore(directory: directory)
        let now = Date()
        try await store.insert(StateStoreConformance.pending("s", now: now), limit: 10, now: now)
        let pending = directory.appending(path: "pending")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: pending.path).first)
        let file = pending.appending(path: name)
        let outside = directory.appending(path: "outside")
        let valid = try kind.plant(at: file, outside: outside)
        let error = await #expect(throws: OpenIDConnectError.self) { _ = try await store.take(state: "s", now: now) }
        #expect(error?.code == .storeFailure)
        #expect(try Data(contentsOf: outside) == valid, "the file a link pointed to is untouched")
        #expect(try await store.take(state: "s", now: now) == nil, "the planted file is gone")
    }

    @Test func theInMemoryStoreBoundsItsSignInRecords() async throws {
        let store = InMemoryOpenIDConnectStateStore(maximumRecords: 2)
        for index in 0..<3 {
            try await store.record(
                OpenIDSignInRecord(
                    identifier: "u\(index)", issuer: "i", subject: "s", sessionID: nil, signedInAt: Date()))
        }
        #expect(try await store.records(issuer: "i", subject: "s", sessionID: nil).map(\.identifier) == ["u1", "u2"])
    }
}

@Suite(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
struct SharedStateStoreSignInTests {
    @Test func aCallbackCompletesOnAnotherInstanceSharingTheFileStore() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "oidc-fleet-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await OpenIDProviderFixture.with { provider in
            let first = try provider.client(
                stateStore: FileOpenIDConnectStateStore(directory: directory), configure: FleetKeys.inStateStore)
            let second = try provider.client(
                stateStore: FileOpenIDConnectStateStore(directory: directory), configure: FleetKeys.inStateStore)
            let query = try await provider.callback(for: first)
            let signIn = try await second.completeSignIn(query)
            #expect(signIn.prototype.identifier == "248289761001")
            await expectRefusal(.stateUnknown) { _ = try await first.completeSignIn(query) }
            // A back-channel logout reaching the first instance finds the sign-in the second recorded.
            try await withRegistry { registry in
                _ = try await registry.open(signIn.prototype)
                let token = try await provider.logoutToken(["sid": try #require(signIn.claims.sessionID)])
                #expect(try await first.handleBackChannelLogout(logoutToken: token, registry: registry).count == 1)
                await expectRefusal(.logoutTokenReplayed) {
                    try await second.handleBackChannelLogout(logoutToken: token, registry: registry)
                }
            }
        }
    }
}
#endif
