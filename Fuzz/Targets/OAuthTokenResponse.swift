import Foundation

/// Fuzz target (see Fuzz/Dispatch.swift): the OAuth 2.0 token / error response parser of
/// ``OAuth2TokenRefresher`` (`OAuth2TokenResponse.credentials`), with the input as the body of a 200, 400, 401, 429
/// and 503 answer.
///
/// Any input must give credentials (for 200 only) or throw a ``UserSessionError`` with code `refreshFailed` or
/// `malformedTokenResponse` and a failure class. Parsed credentials must have a non-empty access token and refresh
/// token, be stamped with the send time, and expire between then and 100 years later. No error may show the previous
/// tokens or the client secret, even when the body echoes them. When both ``StrictJSONScan`` and
/// `JSONSerialization` accept the body, they must count the same number of object members (the scan and the decoder
/// agree on every member name).
func fuzzOAuthTokenResponse(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let body = Data(bytes: start, count: count)
    let sentAt = Date(timeIntervalSinceReferenceDate: 800_000_000)
    let previous = Credentials(
        accessToken: "at-SECRET-7f3c9e1d", refreshToken: "rt-SECRET-b2a4d6f8", expiresAt: sentAt,
        grantedPermissions: ["read"])
    let secrets = ["at-SECRET-7f3c9e1d", "rt-SECRET-b2a4d6f8", "cs-SECRET-0c1e5a77"]
    for status in [200, 400, 401, 429, 503] {
        do {
            let credentials = try OAuth2TokenResponse.credentials(
                status: status, body: body, previous: previous, sentAt: sentAt, secrets: secrets)
            if status != 200 { fatalError("fuzz: HTTP \(status) gave credentials") }
            if credentials.accessToken.isEmpty || credentials.refreshToken?.isEmpty != false {
                fatalError("fuzz: empty access or refresh token")
            }
            if credentials.lastRefreshedAt != sentAt || credentials.source != .refresh {
                fatalError("fuzz: not stamped as a refresh sent at sentAt")
            }
            if let expiresAt = credentials.expiresAt,
                expiresAt < sentAt || expiresAt > sentAt.addingTimeInterval(OAuth2TokenResponse.maximumLifetime)
            {
                fatalError("fuzz: expiry out of range")
            }
        } catch let error as UserSessionError {
            if error.code != .refreshFailed, error.code != .malformedTokenResponse {
                fatalError("fuzz: unexpected error code \(error.code)")
            }
            if error.failureClass == nil { fatalError("fuzz: an error without a failure class") }
            if status == 200, error.failureClass != .transient { fatalError("fuzz: a bad 200 is not transient") }
            let rendered = "\(error) \(error.message)"
            for secret in secrets where rendered.contains(secret) { fatalError("fuzz: an error shows a secret") }
        } catch {
            fatalError("fuzz: untyped error \(type(of: error))")
        }
    }
    if let members = try? StrictJSONScan.check(body),
        let parsed = try? JSONSerialization.jsonObject(with: body, options: [.fragmentsAllowed])
    {
        if members != memberCount(parsed) { fatalError("fuzz: the scan and JSONSerialization disagree on members") }
    }
    return 0
}

private func memberCount(_ value: Any) -> Int {
    if let object = value as? [String: Any] {
        return object.count + object.values.reduce(0) { $0 + memberCount($1) }
    }
    if let array = value as? [Any] {
        return array.reduce(0) { $0 + memberCount($1) }
    }
    return 0
}
