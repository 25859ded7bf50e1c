import Foundation
import Testing

@testable import UserSessions

/// The DPoP key belongs to the credentials: every stored form keeps it, no description shows it, and a release that
/// only knows the previous format refuses credentials with a key instead of dropping it (issue 27).
@Suite struct DPoPKeyTests {
    private let key = DPoPKey(algorithm: .es256, privateKey: Array(0..<32))

    @Test func bothJSONFormsKeepTheKeyAndWriteVersionTwoOnlyWithIt() throws {
        var credentials = Credentials(accessToken: "at", refreshToken: "rt", tokenType: "DPoP", dpopKey: key)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let codable = try encoder.encode(credentials)
        #expect(try JSONDecoder().decode(Credentials.self, from: codable) == credentials)
        #expect(try CredentialsJSON.decode(codable) == credentials)
        let handWritten = try CredentialsJSON.encode(credentials)
        #expect(try JSONDecoder().decode(Credentials.self, from: Data(handWritten)) == credentials)
        let object = try #require(try JSONSerialization.jsonObject(with: codable) as? [String: Any])
        #expect(object["version"] as? Int == 2)
        #expect(object["dpop_key"] as? String == "ES256:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8")

        credentials.dpopKey = nil
        let bearer = try #require(try JSONSerialization.jsonObject(with: encoder.encode(credentials)) as? [String: Any])
        #expect(bearer["version"] as? Int == 1, "credentials without a key stay readable by older releases")
        #expect(String(decoding: try CredentialsJSON.encode(credentials), as: UTF8.self).hasSuffix(#""version":1}"#))
    }

    @Test(arguments: ["ES256", "ES256:", ":AAAA", "ES256:AA+A", "ES256:AA=A", "ES256:A\u{E9}"])
    func aStoredKeyThatIsNotOneIsRefused(stored: String) throws {
        let json = Data(#"{"access_token":"t","version":2,"dpop_key":"\#(stored)"}"#.utf8)
        #expect(throws: (any Error).self) { try JSONDecoder().decode(Credentials.self, from: json) }
        #expect(throws: (any Error).self) { try CredentialsJSON.decode(json) }
    }

    @Test func noDescriptionShowsTheKey() {
        let credentials = Credentials(accessToken: "at", dpopKey: key)
        var dumped = ""
        dump(credentials, to: &dumped)
        for text in [
            "\(credentials)", String(reflecting: credentials), dumped, "\(key)", String(reflecting: key),
        ] {
            #expect(!text.contains("AAECAwQF") && !text.contains("0, 1, 2, 3"), "\(text)")
        }
        #expect("\(credentials)".contains("dpopKey: DPoPKey(ES256, <redacted>)"))
    }

    @Test func nonceMemoryIsPerOriginAndRefusesWhatCannotGoInAProof() throws {
        let proofs = DPoPProofs(signer: NoSigner())
        let api = try #require(URL(string: "https://API.example.com/v1/me?x=1"))
        proofs.remember(nonce: "n-1", for: api)
        #expect(proofs.nonce(for: try #require(URL(string: "https://api.example.com:443/other"))) == "n-1")
        #expect(proofs.nonce(for: try #require(URL(string: "http://api.example.com/v1/me"))) == nil)
        #expect(proofs.nonce(for: try #require(URL(string: "https://api.example.com:8443/v1/me"))) == nil)
        for hostile in ["", "a b", "quote\"", "line\nbreak", String(repeating: "n", count: 513)] {
            proofs.remember(nonce: hostile, for: api)
        }
        #expect(proofs.nonce(for: api) == "n-1")
        #expect(DPoPProofs.target(of: api) == "https://API.example.com/v1/me")
    }

    @Test func theRememberedOriginsAreBounded() throws {
        let proofs = DPoPProofs(signer: NoSigner())
        for index in 0..<(DPoPProofs.maximumOrigins + 10) {
            proofs.remember(nonce: "n", for: try #require(URL(string: "https://host-\(index).example")))
        }
        let remembered = (0..<(DPoPProofs.maximumOrigins + 10)).filter { index in
            proofs.nonce(for: URL(string: "https://host-\(index).example")!) != nil
        }
        #expect(remembered.count == DPoPProofs.maximumOrigins)
    }
}

/// A signer for tests of the nonce memory, which never signs.
private final class NoSigner: DPoPProofSigner {
    struct Refused: Error {}
    func makeKey(_ algorithm: DPoPKey.Algorithm) throws -> DPoPKey { throw Refused() }
    func thumbprint(of key: DPoPKey) throws -> String { throw Refused() }
    func makeProof(
        key: DPoPKey, method: String, url: String, issuedAt: Date, nonce: String?, accessToken: String?
    ) async throws -> String { throw Refused() }
}
