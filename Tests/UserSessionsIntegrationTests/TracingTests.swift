#if Tracing
import Foundation
import Testing
import Tracing
import UserSessions
import UserSessionsTestSupport
import UserSessionsTracing

/// The spans of the `Tracing` trait, recorded by a tracer each test owns (nothing is bootstrapped globally).
struct TracingTests {
    static func configuration(_ tracer: RecordingTracer) -> UserSessionController.Configuration {
        Fixtures.configuration().tracing(UserSessionTracing(tracer: tracer))
    }

    /// Credentials that expire in `seconds`.
    static func credentials(access: String, refresh: String, seconds: TimeInterval = 3600) -> Credentials {
        Credentials(
            accessToken: access, refreshToken: refresh, expiresAt: Date().addingTimeInterval(seconds), source: .signIn)
    }

    @Test func everyStoreCallIsASpanNamedAfterItsOperation() async throws {
        let tracer = RecordingTracer()
        let store = InMemoryTokenStore().tracing(tracer)
        let session = StoredSession(userInfo: UserInfo(id: "alice"), credentials: Fixtures.credentials())
        try await store.save(session, identifier: "alice")
        #expect(try await store.load(identifier: "alice") != nil)
        #expect(try await store.load(identifier: "bob") == nil)
        try await store.saveCurrentIdentifier("alice")
        _ = try await store.loadCurrentIdentifier()
        _ = try await store.storedIdentifiers()
        try await store.remove(identifier: "alice")

        let spans = tracer.endedSpans
        #expect(
            spans.map(\.name) == [
                "user_sessions.store.save", "user_sessions.store.load", "user_sessions.store.load",
                "user_sessions.store.saveCurrentIdentifier", "user_sessions.store.loadCurrentIdentifier",
                "user_sessions.store.storedIdentifiers", "user_sessions.store.remove",
            ])
        #expect(
            spans.map { $0.attribute("db.operation.name") }
                == spans.map { $0.name.split(separator: ".").last.map(String.init) })
        #expect(spans.allSatisfy { $0.attribute("user_sessions.store.type") == "InMemoryTokenStore" })
        #expect(spans.allSatisfy { $0.kind == .internal && !$0.failed })
        #expect(
            spans.filter { $0.name == "user_sessions.store.load" }.map { $0.attribute("user_sessions.store.found") }
                == ["true", "false"])
    }

    @Test func aFailedStoreCallIsAnErrorSpanWithTheErrorTypeOnly() async throws {
        let tracer = RecordingTracer()
        let store = FlakyStore().tracing(tracer)
        store.base.failsWrites = true
        await #expect(throws: (any Error).self) {
            try await store.save(
                StoredSession(userInfo: UserInfo(id: "alice"), credentials: Fixtures.credentials()), identifier: "alice"
            )
        }
        let span = try #require(tracer.spans(named: "user_sessions.store.save").first)
        #expect(span.failed)
        #expect(span.attribute("error.type") == "LeakyError")
        #expect(span.errors.isEmpty)
        #expect(SecretScan.leaked(Fixtures.secrets, in: Array(span.allText.utf8)).isEmpty)
    }

    @Test func aTracedCoordinatedStoreKeepsItsLeaseAndTheRefreshRunsUnderTheLeaseSpan() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "tracing-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let tracer = RecordingTracer()
        let store = FileTokenStore(directory: directory).tracing(tracer)
        #expect((store as any TokenStore) is any CoordinatedTokenStore, "the wrapper keeps the coordination")
        let controller = UserSessionController(
            store: store, refresher: ScriptedRefresher(), configuration: Self.configuration(tracer))
        _ = try await controller.open(Fixtures.prototype("alice"))
        _ = try await controller.refreshCredentials()
        let refresh = try #require(await tracer.waitForSpans(named: "user_sessions.refresh").first)
        let lease = try #require(tracer.spans(named: "user_sessions.store.withRefreshLease").first)
        #expect(lease.ids.parentSpanID == refresh.ids.spanID)
        #expect(lease.attribute("user_sessions.store.type") == "FileTokenStore")
        // The report comes from inside the lease's span, and still lands on the refresh span.
        #expect(refresh.attribute("user_sessions.refresh.outcome") == "succeeded")
        #expect(refresh.attribute("user_sessions.refresh.waiters") == "1")
        let underLease = tracer.endedSpans.filter { $0.ids.parentSpanID == lease.ids.spanID }.map(\.name)
        #expect(underLease.contains("user_sessions.store.loadRevised"))
        #expect(underLease.contains("user_sessions.store.saveRevised"))
        await controller.shutdown()
    }

    @Test func aRefreshIsASpanWhoseRemoteCallIsAClientSpanThatPropagatesTheTraceContext() async throws {
        try await OAuthFixtureServer.with { server in
            let tracer = RecordingTracer()
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"),
                transport: URLSessionHTTPTransport().tracing(tracer))
            let controller = UserSessionController(
                store: InMemoryTokenStore().tracing(tracer), refresher: refresher,
                configuration: Self.configuration(tracer))
            let (refreshToken, accessToken) = try await server.issue()
            _ = try await controller.open(
                UserSessionPrototype(
                    identifier: "alice", userInfo: UserInfo(id: "alice"),
                    credentials: Self.credentials(access: accessToken, refresh: refreshToken)))
            try await tracer.withSpan("request") { _ in _ = try await controller.refreshCredentials() }

            let request = try #require(await tracer.waitForSpans(named: "request").first)
            let refresh = try #require(await tracer.waitForSpans(named: "user_sessions.refresh").first)
            let post = try #require(tracer.spans(named: "POST").first)
            // The flight runs in a task of its own, started in the caller's context: the request's child.
            #expect(refresh.ids.parentSpanID == request.ids.spanID)
            #expect(refresh.ids.traceID == request.ids.traceID)
            #expect(refresh.attribute("user_sessions.refresh.outcome") == "succeeded")
            #expect(refresh.attribute("user_sessions.refresh.waiters") == "1")
            #expect(refresh.attribute("user_sessions.refresh.failure_class") == nil)
            #expect(!refresh.failed)
            #expect(post.ids.parentSpanID == refresh.ids.spanID)
            #expect(post.kind == .client)
            #expect(post.attribute("http.request.method") == "POST")
            #expect(post.attribute("server.address") == "127.0.0.1")
            #expect(post.attribute("server.port") == String(server.port))
            #expect(post.attribute("url.scheme") == "http")
            #expect(post.attribute("url.path") == "/token")
            #expect(post.attribute("http.response.status_code") == "200")
            // The commit's store write is the refresh's child too.
            let save = try #require(tracer.spans(named: "user_sessions.store.save").last)
            #expect(save.ids.parentSpanID == refresh.ids.spanID)
            // The token endpoint got the client span's context as W3C `traceparent`.
            let traceparent = try await server.stats().lastTraceparent
            #expect(traceparent == "00-\(post.ids.traceID)-\(post.ids.spanID)-01")
            await controller.shutdown()
        }
    }

    @Test func aFailedRefreshCarriesItsOutcomeAndFailureClass() async throws {
        let tracer = RecordingTracer()
        let refresher = ScriptedRefresher([.failure(Fixtures.terminalFailure())])
        let controller = UserSessionController(
            store: InMemoryTokenStore(), refresher: refresher, configuration: Self.configuration(tracer))
        _ = try await controller.open(Fixtures.prototype("alice"))
        await #expect(throws: UserSessionError.self) { try await controller.refreshCredentials() }
        let refresh = try #require(await tracer.waitForSpans(named: "user_sessions.refresh").first)
        #expect(refresh.attribute("user_sessions.refresh.outcome") == "failed")
        #expect(refresh.attribute("user_sessions.refresh.failure_class") == "terminal")
        #expect(refresh.attribute("error.type") == "terminal")
        #expect(refresh.failed)
        await controller.shutdown()
    }

    @Test func aRestoreIsASpanWithItsStoreReadAsChild() async throws {
        let tracer = RecordingTracer()
        let store = InMemoryTokenStore().tracing(tracer)
        try await store.base.save(
            StoredSession(userInfo: UserInfo(id: "alice"), credentials: Fixtures.credentials()), identifier: "alice")
        let controller = UserSessionController(
            store: store, refresher: ScriptedRefresher(), configuration: Self.configuration(tracer))
        #expect(try await controller.restore(identifier: "alice") != nil)
        let restore = try #require(await tracer.waitForSpans(named: "user_sessions.restore").first)
        let load = try #require(tracer.spans(named: "user_sessions.store.load").first)
        #expect(load.ids.parentSpanID == restore.ids.spanID)
        #expect(!restore.failed)
        await controller.close()

        await #expect(throws: UserSessionError.self) { try await controller.restore(identifier: "bob") }
        let failed = try #require(await tracer.waitForSpans(named: "user_sessions.restore", count: 2).last)
        #expect(failed.failed)
        #expect(failed.attribute("error.type") == "noStoredSession")
        await controller.shutdown()
    }

    @Test func aRevocationAtSignOutIsASpan() async throws {
        let tracer = RecordingTracer()
        let controller = UserSessionController(
            store: InMemoryTokenStore(), refresher: FailingRevoker(), configuration: Self.configuration(tracer))
        _ = try await controller.open(Fixtures.prototype("alice"))
        try await controller.closeAndClear()
        let revocation = try #require(await tracer.waitForSpans(named: "user_sessions.revocation").first)
        #expect(revocation.failed)
        #expect(revocation.attribute("error.type") == "revocationFailed")
        await controller.shutdown()
    }

    @Test func noSpanCarriesATokenOrAnErrorDescription() async throws {
        try await OAuthFixtureServer.with { server in
            let tracer = RecordingTracer()
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint, revocationEndpoint: server.revocationEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: "client-secret"),
                transport: URLSessionHTTPTransport().tracing(tracer))
            let flaky = FlakyStore()
            let controller = UserSessionController(
                store: flaky.tracing(tracer), refresher: refresher, configuration: Self.configuration(tracer))
            let (refreshToken, accessToken) = try await server.issue()
            _ = try await controller.open(
                UserSessionPrototype(
                    identifier: "alice", userInfo: UserInfo(id: "alice"),
                    credentials: Self.credentials(access: accessToken, refresh: refreshToken)))
            // A refresh whose write fails with an error that prints a token, then a sign-out that revokes.
            flaky.failsWrites = true
            let refreshed = try await controller.refreshCredentials()
            _ = await tracer.waitForSpans(named: "user_sessions.refresh")
            flaky.failsWrites = false
            try await controller.closeAndClear()
            _ = await tracer.waitForSpans(named: "user_sessions.revocation")
            await controller.shutdown()

            let secrets =
                Fixtures.secrets + [refreshToken, accessToken, "client-secret"]
                + SecretScan.tokens(of: refreshed)
            let spans = tracer.endedSpans
            #expect(spans.contains { $0.name == "POST" && $0.attribute("url.path") == "/revoke" })
            #expect(spans.contains { $0.name == "user_sessions.store.save" && $0.failed })
            for span in spans {
                #expect(SecretScan.leaked(secrets, in: Array(span.allText.utf8)).isEmpty, "\(span.name)")
                #expect(span.errors.isEmpty, "\(span.name)")
            }
        }
    }
}
#endif
