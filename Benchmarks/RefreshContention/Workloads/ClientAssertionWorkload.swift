import Foundation
import UserSessions

#if OpenIDConnect
import Crypto
import UserSessionsOpenIDConnect
#endif

/// Workload J: what sender-constrained requests add. One task at a time, requests one after the other:
/// - a token request's `private_key_jwt` assertion: ES256 client assertions from a ``PrivateKeyJWTSigner`` (jwt-kit:
///   the claims' JSON, a fresh 256-bit `jti`, an ECDSA P-256 signature), exactly as `OAuth2TokenRefresher` asks for
///   one before every request it authenticates;
/// - an API request's headers, as the token-forwarding proxy and `withAuthorization` ask for them: the controller's
///   `authorizationHeaders(method:url:)` for a session with a bearer token (the floor: the hot path and one header),
///   and for sessions bound with DPoP, whose every request carries a new proof (ES256 and EdDSA keys, `ath` of the
///   token, through jwt-kit).
struct ClientAssertionWorkload {
    let plan: BenchmarkPlan

    /// One row: what is made per request, with its nanoseconds per request, one figure per repetition.
    struct Measured {
        var request: String
        var what: String
        var algorithm: String
        var samples: [Double] = []
    }

    struct Outcome {
        var rows: [Measured] = []
        var skipped: [String] = []
        var failures: [String] = []
    }

    static func weight(_ plan: BenchmarkPlan) -> Double { Double(plan.repetitions * 4) }

    func run(progress: ProgressLine) async -> Outcome {
        var outcome = Outcome()
        #if OpenIDConnect
        do {
            let pem = P256.Signing.PrivateKey().pemRepresentation
            let signer = try PrivateKeyJWTSigner(pem: pem, algorithm: .es256, keyID: "bench")
            // The first signature adds the key to jwt-kit's collection: not part of the steady state.
            _ = try await signer.makeClientAssertion(clientID: "bench-app", audience: "https://id.example")
            var assertion = Measured(request: "token request", what: "private_key_jwt assertion", algorithm: "ES256")
            assertion.samples = try await measure(progress, label: "assertion") {
                _ = try await signer.makeClientAssertion(clientID: "bench-app", audience: "https://id.example")
            }
            outcome.rows.append(assertion)

            let proofs = DPoPProofs(signer: DPoPSigner())
            for (what, algorithm) in [
                ("bearer token", nil), ("DPoP proof", DPoPKey.Algorithm.es256), ("DPoP proof", .edDSA),
            ] {
                let controller = try await Self.openedController(
                    key: try algorithm.map { try proofs.signer.makeKey($0) }, proofs: proofs)
                guard let url = URL(string: "https://api.example/v1/profile") else {
                    throw BenchmarkError("bad API URL")
                }
                var row = Measured(request: "API request", what: what, algorithm: algorithm?.rawValue ?? "-")
                row.samples = try await measure(progress, label: "\(what) \(row.algorithm)") {
                    _ = try await controller.authorizationHeaders(method: "GET", url: url)
                }
                outcome.rows.append(row)
                await controller.shutdown()
            }
        } catch {
            outcome.failures.append("sender-constrained requests: \(error)")
        }
        #else
        outcome.skipped.append(
            "private_key_jwt and DPoP rows skipped: built without the OpenIDConnect trait (swift run -c release --traits "
                + "OpenIDConnect …)")
        #endif
        return outcome
    }

    /// Nanoseconds per call of `body`, `plan.clientAssertions` calls per repetition, one figure per repetition.
    private func measure(_ progress: ProgressLine, label: String, _ body: () async throws -> Void) async throws
        -> [Double]
    {
        try await body()  // warm-up: first allocations, the key's first use
        let clock = ContinuousClock()
        var samples: [Double] = []
        for repetition in 1...plan.repetitions {
            let start = clock.now
            for _ in 0..<plan.clientAssertions { try await body() }
            samples.append((clock.now - start).inNanoseconds / Double(plan.clientAssertions))
            progress.advance(by: 1, detail: "\(label) #\(repetition)")
        }
        return samples
    }

    #if OpenIDConnect
    /// A controller with a session whose token stays fresh for a day, bound to `key` when one is given. Its
    /// refresher is never called; it only carries the proofs.
    private static func openedController(key: DPoPKey?, proofs: DPoPProofs) async throws -> UserSessionController {
        guard let endpoint = URL(string: "http://127.0.0.1:9/token") else { throw BenchmarkError("bad token endpoint") }
        let refresher = try OAuth2TokenRefresher(
            tokenEndpoint: endpoint,
            clientAuthentication: .publicClient(id: "bench-app"), dpop: proofs)
        let controller = UserSessionController(store: InMemoryTokenStore(), refresher: refresher)
        let credentials = Credentials(
            accessToken: String(repeating: "a", count: 43), refreshToken: "r",
            tokenType: key == nil ? "Bearer" : "DPoP",
            expiresAt: Date(timeIntervalSinceNow: 86_400), dpopKey: key)
        _ = try await controller.open(
            UserSessionPrototype(identifier: "bench", userInfo: UserInfo(id: "bench"), credentials: credentials))
        return controller
    }
    #endif
}
