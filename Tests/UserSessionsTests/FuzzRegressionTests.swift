import Foundation
import Testing

@testable import UserSessions

/// Replays the fuzzers' committed inputs (`Fuzz/Corpus/<Target>/`) through the same checks as the libFuzzer targets
/// in `Fuzz/Targets/`, in the normal suite and without sanitizers.
///
/// A crashing input found by `Fuzz/run.sh` becomes a regression test by copying it from `fuzz-out/<Target>/artifacts/`
/// into `Fuzz/Corpus/<Target>/` (under a name saying what it broke) and fixing the bug: from then on this suite
/// replays it on every run. So far the fuzzers have found no crash (see RELIABILITY.md), so every file here is a seed.
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
