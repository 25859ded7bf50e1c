import Foundation

/// Fuzz target (see Fuzz/Dispatch.swift): the remote token-cache response parser
/// (`RemoteTokenCacheProtocol.parseResponse`) and the decoding of the `token_info` it carries (`decodeSession`,
/// `decodeCurrentIdentifier`).
///
/// The input is tried both as a whole response body and as a bare `token_info` string. The response parser may only
/// throw `transportFailure`; the `token_info` decoders only `storeCorrupt` or `unsupportedFormatVersion`.
func fuzzRemoteResponse(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let data = Data(bytes: start, count: count)
    var tokenInfos = [String(decoding: data, as: UTF8.self)]
    expect([.transportFailure]) {
        let response = try RemoteTokenCacheProtocol.parseResponse(data)
        if let tokenInfo = response.tokenInfo {
            if RemoteTokenCacheProtocol.isEmptyTokenInfo(tokenInfo) {
                fatalError("fuzz: an empty token_info was passed on")
            }
            tokenInfos.append(tokenInfo)
        }
        if let message = response.errorMessage, message.count > RemoteTokenCacheProtocol.maximumMessageLength {
            fatalError("fuzz: an error message longer than the limit was passed on")
        }
    }
    for tokenInfo in tokenInfos {
        expect([.storeCorrupt, .unsupportedFormatVersion]) {
            let (session, identifier) = try RemoteTokenCacheProtocol.decodeSession(tokenInfo)
            // What was decoded must encode again (dates lose nothing below a millisecond they did not have).
            _ = try RemoteTokenCacheProtocol.encodeSession(session, identifier: identifier ?? "fuzz")
        }
        expect([.storeCorrupt, .unsupportedFormatVersion]) {
            _ = try RemoteTokenCacheProtocol.decodeCurrentIdentifier(tokenInfo)
        }
    }
    return 0
}

/// Runs `body`; traps (a crash for libFuzzer) on an error that is not a ``UserSessionError`` with one of `codes`.
private func expect(_ codes: [UserSessionError.Code], _ body: () throws -> Void) {
    do {
        try body()
    } catch let error as UserSessionError {
        if !codes.contains(error.code) { fatalError("fuzz: unexpected error code \(error.code)") }
    } catch {
        fatalError("fuzz: untyped error \(type(of: error))")
    }
}
