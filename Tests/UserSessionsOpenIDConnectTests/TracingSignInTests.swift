#if OpenIDConnect && Tracing
import Foundation
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport
import UserSessionsTracing

/// The spans of a sign-in and a back-channel logout against the provider fixture, recorded by a tracer each test
/// owns.
@Suite(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
struct TracingSignInTests {
    /// A client whose operations and remote calls are traced by `tracer`.
    static func client(_ provider: OpenIDProviderFixture, _ tracer: RecordingTracer) throws -> OpenIDConnectClient {
        try provider.client(transport: URLSessionHTTPTransport().tracing(tracer)) { configuration in
            configuration.instrumentation = UserSessionTracing(tracer: tracer)
        }
    }

    /// The values of `names` in the query `query`.
    static func values(_ names: Set<String>, in query: String) -> [String] {
        let items = URLComponents(string: "https://x/?" + query)?.queryItems ?? []
        return items.filter { names.contains($0.name) }.compactMap(\.value)
    }

    @Test func aSignInIsASpanWithTheCodeExchangeAndTheKeySetFetchAsChildren() async throws {
        try await OpenIDProviderFixture.with { provider in
            let tracer = RecordingTracer()
            let client = try Self.client(provider, tracer)
            let callback = try await provider.callback(for: client)
            let signIn = try await client.completeSignIn(callback)

            let span = try #require(await tracer.waitForSpans(named: "user_sessions.sign_in").first)
            #expect(!span.failed)
            let children = tracer.endedSpans.filter { $0.ids.parentSpanID == span.ids.spanID }
            let exchange = try #require(children.first { $0.attribute("url.path") == "/token" })
            #expect(exchange.kind == .client && exchange.attribute("http.request.method") == "POST")
            #expect(exchange.attribute("http.response.status_code") == "200")
            let keySet = try #require(children.first { $0.name == "user_sessions.jwks_fetch" })
            let keySetGet = try #require(tracer.endedSpans.first { $0.ids.parentSpanID == keySet.ids.spanID })
            #expect(keySetGet.attribute("url.path") == "/jwks" && keySetGet.attribute("http.request.method") == "GET")

            // Nothing of the callback (its code and state), the sealed pending sign-in or the tokens is in a span.
            let credentials = try #require(signIn.prototype.credentials)
            let secrets =
                Self.values(["code", "state"], in: callback.query) + [callback.sealed ?? "", credentials.idToken ?? ""]
                + SecretScan.tokens(of: credentials) + ["web-secret"]
            #expect(secrets.count >= 5)
            for recorded in tracer.endedSpans {
                #expect(SecretScan.leaked(secrets, in: Array(recorded.allText.utf8)).isEmpty, "\(recorded.name)")
                #expect(recorded.errors.isEmpty)
            }
        }
    }

    @Test func aRefusedCallbackIsAFailedSignInSpanWithItsCode() async throws {
        try await OpenIDProviderFixture.with { provider in
            let tracer = RecordingTracer()
            let client = try Self.client(provider, tracer)
            let callback = try await provider.callback(for: client)
            let forged = callback.rewritingQuery { items in
                items.map { $0.hasPrefix("state=") ? "state=forged-state-value" : $0 }
            }
            await #expect(throws: OpenIDConnectError.self) { try await client.completeSignIn(forged) }
            let span = try #require(await tracer.waitForSpans(named: "user_sessions.sign_in").first)
            #expect(span.failed)
            #expect(span.attribute("error.type") == "stateMismatch" || span.attribute("error.type") == "stateUnknown")
            #expect(!span.allText.contains("forged-state-value"))
        }
    }

    @Test func aBackChannelLogoutIsASpanAndItsTokenIsNotInIt() async throws {
        try await OpenIDProviderFixture.with { provider in
            let tracer = RecordingTracer()
            let client = try Self.client(provider, tracer)
            try await withRegistry { registry in
                let signIn = try await client.completeSignIn(try await provider.callback(for: client))
                _ = try await registry.open(signIn.prototype)
                let sid = try #require(signIn.claims.sessionID)
                let token = try await provider.logoutToken(["sid": sid])
                #expect(try await client.handleBackChannelLogout(logoutToken: token, registry: registry).count == 1)
                await #expect(throws: OpenIDConnectError.self) {
                    try await client.handleBackChannelLogout(logoutToken: token, registry: registry)
                }
                let spans = await tracer.waitForSpans(named: "user_sessions.backchannel_logout", count: 2)
                #expect(!spans[0].failed)
                #expect(spans[1].failed && spans[1].attribute("error.type") == "logoutTokenReplayed")
                for recorded in tracer.endedSpans {
                    #expect(SecretScan.leaked([token], in: Array(recorded.allText.utf8)).isEmpty, "\(recorded.name)")
                }
            }
        }
    }
}
#endif
