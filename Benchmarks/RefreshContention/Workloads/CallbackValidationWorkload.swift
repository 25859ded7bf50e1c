import Foundation
import UserSessions

#if OpenIDConnect
import Crypto
import JWTKit
import UserSessionsOpenIDConnect
import _CryptoExtras
#endif

/// Workload K: what validating the ID token of a sign-in callback costs, per signing algorithm, against jwt-kit's
/// `verify` alone on the same token with the key already in a collection (the peer: what a caller of jwt-kit does
/// at the least).
///
/// Ours is `OpenIDConnectClient.validateIDToken(_:pending:accessToken:)`, the callback's whole check of an ID token:
/// the header read, the algorithm allow-list, the key chosen from the provider's JWKS (fetched once, before the
/// clock starts, from an in-process transport that serves it), the signature, then `iss`, `aud`, `azp`, `exp`,
/// `iat`, `nonce` and `at_hash`. Goal: within 1.5× of jwt-kit's verify.
struct CallbackValidationWorkload {
    let plan: BenchmarkPlan

    struct Sample {
        var algorithm: String
        /// Nanoseconds per validation: ours, and jwt-kit's verify alone.
        var ours: Double
        var jwtKit: Double
    }

    struct Outcome {
        var samples: [Sample] = []
        var skipped: [String] = []
        var failures: [String] = []
    }

    static let algorithms = ["RS256", "ES256", "EdDSA"]

    static func weight(_ plan: BenchmarkPlan) -> Double { Double(plan.repetitions * algorithms.count) }

    func run(progress: ProgressLine) async -> Outcome {
        var outcome = Outcome()
        #if OpenIDConnect
        for algorithm in Self.algorithms {
            do {
                let setup = try await Setup(algorithm: algorithm)
                // The first validation fetches the JWKS and fills caches: not part of the steady state.
                try await setup.validateOurs()
                try await setup.verifyWithJWTKit()
                let clock = ContinuousClock()
                let count = plan.callbackValidations
                for repetition in 1...plan.repetitions {
                    var start = clock.now
                    for _ in 0..<count { try await setup.validateOurs() }
                    let ours = (clock.now - start).inNanoseconds / Double(count)
                    start = clock.now
                    for _ in 0..<count { try await setup.verifyWithJWTKit() }
                    let jwtKit = (clock.now - start).inNanoseconds / Double(count)
                    outcome.samples.append(Sample(algorithm: algorithm, ours: ours, jwtKit: jwtKit))
                    progress.advance(by: 1, detail: "\(algorithm) #\(repetition)")
                }
            } catch {
                outcome.failures.append("callback validation \(algorithm): \(error)")
            }
        }
        #else
        outcome.skipped.append(
            "callback validation rows skipped: built without the OpenIDConnect trait (swift run -c release --traits "
                + "OpenIDConnect …)")
        #endif
        return outcome
    }
}

#if OpenIDConnect
extension CallbackValidationWorkload {
    /// The claims of the benchmark's ID token.
    struct IDTokenClaims: JWTPayload {
        var iss: String
        var sub: String
        var aud: String
        var exp: Int
        var iat: Int
        var nonce: String

        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// One algorithm's provider (a key, its JWKS, a signed ID token), our client, and jwt-kit's collection.
    struct Setup: Sendable {
        static let issuer = "https://id.example"
        static let clientID = "bench-app"
        let client: OpenIDConnectClient
        let pending: PendingSignIn
        let token: String
        let collection: JWTKeyCollection

        init(algorithm: String) async throws {
            let signing = JWTKeyCollection()
            let jwk: JWK
            let keyID = JWKIdentifier(string: "bench-\(algorithm)")
            switch algorithm {
            case "RS256":
                let key = try Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
                await signing.add(rsa: key, digestAlgorithm: .sha256, kid: keyID)
                let (modulus, exponent) = try key.publicKey.getKeyPrimitives()
                jwk = .rsa(
                    .rs256, identifier: keyID, modulus: base64URLEncode(modulus), exponent: base64URLEncode(exponent))
            case "ES256":
                let key = ES256PrivateKey()
                await signing.add(ecdsa: key, kid: keyID)
                guard let parameters = key.publicKey.parameters else { throw BenchmarkError("no P-256 parameters") }
                jwk = .ecdsa(.es256, identifier: keyID, x: parameters.x, y: parameters.y, curve: .p256)
            default:
                let key = try EdDSA.PrivateKey(curve: .ed25519)
                await signing.add(eddsa: key, kid: keyID)
                jwk = .octetKeyPair(
                    .eddsa, identifier: keyID, x: base64URLEncode(key.publicKey.rawRepresentation), y: nil,
                    curve: .ed25519)
            }
            let now = Int(Date().timeIntervalSince1970)
            let nonce = "nonce-of-the-benchmark"
            token = try await signing.sign(
                IDTokenClaims(
                    iss: Self.issuer, sub: "user-1", aud: Self.clientID, exp: now + 3600, iat: now, nonce: nonce),
                kid: keyID)
            let jwks = Data(#"{"keys":["#.utf8) + (try JSONEncoder().encode(jwk)) + Data("]}".utf8)
            let provider = OpenIDProviderMetadata(
                issuer: Self.issuer, authorizationEndpoint: Self.url("\(Self.issuer)/authorize"),
                tokenEndpoint: Self.url("\(Self.issuer)/token"), jwksURI: Self.url("\(Self.issuer)/jwks"))
            let configuration = OpenIDConnectConfiguration(
                clientAuthentication: .clientSecretBasic(id: Self.clientID, secret: "bench-secret"),
                redirectURI: Self.url("https://app.example/callback"), allowedAlgorithms: [algorithm])
            client = try OpenIDConnectClient(
                provider: provider, configuration: configuration, transport: ServingTransport(jwks: jwks))
            pending = PendingSignIn(
                state: "state", nonce: nonce, codeVerifier: "verifier",
                redirectURI: Self.url("https://app.example/callback"), createdAt: Date(),
                expiresAt: Date().addingTimeInterval(600))
            collection = JWTKeyCollection()
            try await collection.add(jwk: jwk)
        }

        func validateOurs() async throws {
            let claims = try await client.validateIDToken(token, pending: pending, accessToken: nil)
            guard claims.subject == "user-1" else { throw BenchmarkError("the ID token's subject was lost") }
        }

        func verifyWithJWTKit() async throws {
            let claims = try await collection.verify(token, as: IDTokenClaims.self)
            guard claims.sub == "user-1" else { throw BenchmarkError("the ID token's subject was lost") }
        }

        /// A URL from a literal the workload spells correctly.
        static func url(_ text: String) -> URL { URL(string: text) ?? URL(fileURLWithPath: "/") }
    }

    /// Serves the JWKS to the client's one fetch, in process; anything else is a 404.
    struct ServingTransport: HTTPTransport {
        let jwks: Data

        func send(_ request: HTTPTransportRequest) async throws -> HTTPTransportResponse {
            guard request.url.path == "/jwks" else { return HTTPTransportResponse(statusCode: 404) }
            return HTTPTransportResponse(
                statusCode: 200, headers: [("Content-Type", "application/json")], body: jwks)
        }
    }
}
#endif
