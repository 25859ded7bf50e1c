import Foundation
import Testing

@testable import UserSessions

/// Replays the fuzzers' committed inputs (`Fuzz/Corpus/<Target>/`) through the same checks as the libFuzzer targets
/// in `Fuzz/Targets/`, in the normal suite and without sanitizers.
///
/// A crashing input found by `Fuzz/run.sh` becomes a regression test by copying it from `fuzz-out/<Target>/artifacts/`
/// into `Fuzz/Corpus/<Target>/` (under a name saying what it broke) and fixing the bug: from then on this suite
/// replays it on every run. Crashes found so far and fixed: see RELIABILITY.md; the other files are seeds.
struct FuzzRegressionTests {
    static let corpusRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appending(path: "Fuzz/Corpus", directoryHint: .isDirectory)

    static func inputs(of target: String) throws -> [(name: String, data: Data)] {
        let directory = corpusRoot.appending(path: target, directoryHint: .isDirectory)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path(percentEncoded: false)).sorted()
        return try names.map { ($0, try Data(contentsOf: directory.appending(path: $0))) }
    }

    @Test func signInResponseInputsParseOrFailWithTheirCode() throws {
        let inputs = try Self.inputs(of: "SignInResponse")
        #expect(!inputs.isEmpty)
        var parsed = 0
        for (name, data) in inputs {
            do {
                let prototype = try UserSessionPrototype(
                    signInResponse: data, receivedAt: Date(timeIntervalSince1970: 0))
                #expect(!prototype.identifier.isEmpty && !prototype.identifier.utf8.contains(0), "\(name)")
                if let credentials = prototype.credentials { #expect(!credentials.accessToken.isEmpty, "\(name)") }
                parsed += 1
            } catch let error as UserSessionError {
                #expect(error.code == .malformedSignInResponse, "\(name)")
            }
        }
        #expect(parsed > 0, "no seed parses: the fuzzer would start from nothing")
    }

    @Test func oauthTokenResponseInputsParseOrFailWithTheirCodeAndNeverShowSecrets() throws {
        let inputs = try Self.inputs(of: "OAuthTokenResponse")
        #expect(!inputs.isEmpty)
        let sentAt = Date(timeIntervalSinceReferenceDate: 800_000_000)
        let secrets = ["at-SECRET-7f3c9e1d", "rt-SECRET-b2a4d6f8", "cs-SECRET-0c1e5a77"]
        let previous = Credentials(accessToken: secrets[0], refreshToken: secrets[1], expiresAt: sentAt)
        var parsed = 0
        for (name, data) in inputs {
            for status in [200, 400, 401, 429, 503] {
                do {
                    let credentials = try OAuth2TokenResponse.credentials(
                        status: status, body: data, previous: previous, sentAt: sentAt, secrets: secrets)
                    #expect(status == 200, "\(name): HTTP \(status) gave credentials")
                    #expect(!credentials.accessToken.isEmpty && credentials.refreshToken?.isEmpty == false, "\(name)")
                    #expect(credentials.lastRefreshedAt == sentAt && credentials.source == .refresh, "\(name)")
                    if let expiresAt = credentials.expiresAt {
                        #expect(expiresAt >= sentAt, "\(name)")
                        #expect(expiresAt <= sentAt.addingTimeInterval(OAuth2TokenResponse.maximumLifetime), "\(name)")
                    }
                    parsed += 1
                } catch let error as UserSessionError {
                    #expect([.refreshFailed, .malformedTokenResponse].contains(error.code), "\(name): \(error)")
                    #expect(error.failureClass != nil, "\(name)")
                    if status == 200 { #expect(error.failureClass == .transient, "\(name)") }
                    for secret in secrets { #expect(!"\(error) \(error.message)".contains(secret), "\(name)") }
                }
            }
        }
        #expect(parsed > 0, "no seed parses: the fuzzer would start from nothing")
    }

    @Test func theStrictScanCountsTheMembersTheDecoderSeesForEveryInput() throws {
        func count(_ value: ParsedJSON) -> Int {
            switch value {
            case .array(let elements): elements.reduce(0) { $0 + count($1) }
            case .object(let members): members.count + members.values.reduce(0) { $0 + count($1) }
            default: 0
            }
        }
        var compared = 0
        for target in ["SignInResponse", "TokenFile", "RemoteResponse", "OAuthTokenResponse"] {
            for (name, data) in try Self.inputs(of: target) {
                guard let members = try? StrictJSONScan.check(data), let parsed = try? ParsedJSON(parsing: data)
                else { continue }
                #expect(members == count(parsed), "\(target)/\(name)")
                compared += 1
            }
        }
        #expect(compared > 0)
    }

    @Test func tokenFileInputsDecodeAndRoundTripOrFailWithTheirCode() throws {
        let inputs = try Self.inputs(of: "TokenFile")
        #expect(!inputs.isEmpty)
        var decoded = 0
        for (name, data) in inputs {
            for format in [FileTokenStore.tokenFileFormat, FileTokenStore.currentIdentifierFileFormat] {
                do {
                    let envelope = try TokenFileCoding.decode(Array(data), format: format, file: name)
                    let again = try TokenFileCoding.decode(TokenFileCoding.encode(envelope), format: format, file: name)
                    #expect(again.identifier == envelope.identifier && again.session == envelope.session, "\(name)")
                    decoded += 1
                } catch let error as UserSessionError {
                    #expect([.storeCorrupt, .unsupportedFormatVersion].contains(error.code), "\(name): \(error)")
                }
            }
        }
        #expect(decoded > 0, "no seed decodes: the fuzzer would start from nothing")
    }

    @Test func remoteResponseInputsParseOrFailWithTheirCode() throws {
        let inputs = try Self.inputs(of: "RemoteResponse")
        #expect(!inputs.isEmpty)
        var sessions = 0
        for (name, data) in inputs {
            var tokenInfos = [String(decoding: data, as: UTF8.self)]
            do {
                let response = try RemoteTokenCacheProtocol.parseResponse(data)
                if let tokenInfo = response.tokenInfo {
                    #expect(!RemoteTokenCacheProtocol.isEmptyTokenInfo(tokenInfo), "\(name)")
                    tokenInfos.append(tokenInfo)
                }
            } catch let error as UserSessionError {
                #expect(error.code == .transportFailure, "\(name)")
            }
            for tokenInfo in tokenInfos {
                do {
                    let (session, identifier) = try RemoteTokenCacheProtocol.decodeSession(tokenInfo)
                    _ = try RemoteTokenCacheProtocol.encodeSession(session, identifier: identifier ?? "fuzz")
                    sessions += 1
                } catch let error as UserSessionError {
                    #expect([.storeCorrupt, .unsupportedFormatVersion].contains(error.code), "\(name): \(error)")
                }
                do {
                    _ = try RemoteTokenCacheProtocol.decodeCurrentIdentifier(tokenInfo)
                } catch let error as UserSessionError {
                    #expect([.storeCorrupt, .unsupportedFormatVersion].contains(error.code), "\(name): \(error)")
                }
            }
        }
        #expect(sessions > 0, "no seed holds a session: the fuzzer would start from nothing")
    }
}
