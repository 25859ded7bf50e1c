import Foundation
import UserSessions

#if OpenIDConnect
import Crypto
import UserSessionsOpenIDConnect
#endif

/// Workload J: what `private_key_jwt` adds to a token request. One task makes ES256 client assertions one after the
/// other with a ``PrivateKeyJWTSigner`` (jwt-kit: the claims' JSON, a fresh 256-bit `jti`, an ECDSA P-256 signature),
/// exactly as `OAuth2TokenRefresher` asks for one before every request it authenticates.
struct ClientAssertionWorkload {
    let plan: BenchmarkPlan

    struct Outcome {
        /// Nanoseconds per assertion, one figure per repetition.
        var samples: [Double] = []
        var skipped: [String] = []
        var failures: [String] = []
    }

    static func weight(_ plan: BenchmarkPlan) -> Double { Double(plan.repetitions) }

    func run(progress: ProgressLine) async -> Outcome {
        var outcome = Outcome()
        #if OpenIDConnect
        do {
            let pem = P256.Signing.PrivateKey().pemRepresentation
            let signer = try PrivateKeyJWTSigner(pem: pem, algorithm: .es256, keyID: "bench")
            // The first signature adds the key to jwt-kit's collection: not part of the steady state.
            _ = try await signer.makeClientAssertion(clientID: "bench-app", audience: "https://id.example")
            let clock = ContinuousClock()
            for repetition in 1...plan.repetitions {
                let start = clock.now
                for _ in 0..<plan.clientAssertions {
                    _ = try await signer.makeClientAssertion(clientID: "bench-app", audience: "https://id.example")
                }
                outcome.samples.append((clock.now - start).inNanoseconds / Double(plan.clientAssertions))
                progress.advance(by: 1, detail: "#\(repetition)")
            }
        } catch {
            outcome.failures.append("private_key_jwt: \(error)")
        }
        #else
        outcome.skipped.append(
            "private_key_jwt rows skipped: built without the OpenIDConnect trait (swift run -c release --traits "
                + "OpenIDConnect …)")
        #endif
        return outcome
    }
}
