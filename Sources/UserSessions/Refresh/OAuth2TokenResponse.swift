import Foundation

/// Parses token endpoint responses (RFC 6749 §5.1 and §5.2) into credentials or classified errors.
///
/// Every body goes through ``StrictJSONScan`` first: a success body with duplicate members, nesting deeper than 128
/// levels or invalid syntax is ``UserSessionError/Code/malformedTokenResponse`` (transient); a 4xx body with
/// duplicate members or too-deep nesting is `malformedTokenResponse` (misconfiguration: never read as
/// `invalid_grant`), and one that is not JSON is a 4xx "without an OAuth error", as before.
package enum OAuth2TokenResponse {
    /// The longest `expires_in` taken at face value (100 years); larger values are clamped.
    static let maximumLifetime: Double = 100 * 365 * 24 * 3600

    static func credentials(
        status: Int, body: Data, previous: Credentials, sentAt: Date, secrets: [String]
    ) throws -> Credentials {
        guard (200..<300).contains(status) else {
            throw failure(
                status: status, body: body, secrets: secrets, endpoint: "the token endpoint", code: .refreshFailed)
        }
        return try parseSuccess(body, previous: previous, sentAt: sentAt, source: .refresh)
    }

    /// The classified error for a response whose status is not 2xx (RFC 6749 §5.2), from `endpoint` (for example
    /// "the token endpoint"); `code` is the code of answers that are not malformed (``UserSessionError/Code/refreshFailed``
    /// for refreshes).
    package static func failure(
        status: Int, body: Data, secrets: [String], endpoint: String, code: UserSessionError.Code
    ) -> UserSessionError {
        // Duplicate members and absurd nesting make a body unusable, whatever the status: parsers disagree on which
        // duplicate wins, so we could read a different error code than a proxy did.
        let refusal = refusal(of: body)
        switch status {
        case 300..<400:
            return UserSessionError(
                code, "\(endpoint) answered HTTP \(status) (redirects are not followed)", failureClass: .transient)
        case 408, 429, 500..<600:
            var message = "\(endpoint) answered HTTP \(status)"
            if refusal == nil, let error = parseError(body, secrets: secrets) { message += ": \(error.summary)" }
            return UserSessionError(code, message, failureClass: .transient)
        case 400..<500:
            if let refusal, refusal.problem != .invalidSyntax {
                // JSON, but ambiguous: never read an `invalid_grant` out of it (that would end the session).
                return UserSessionError(
                    .malformedTokenResponse, "\(endpoint) answered HTTP \(status) with a body that is \(refusal)",
                    failureClass: .misconfiguration)
            }
            guard refusal == nil, let error = parseError(body, secrets: secrets) else {
                return UserSessionError(
                    code, "\(endpoint) answered HTTP \(status) without an OAuth error", failureClass: .misconfiguration)
            }
            return UserSessionError(
                code, "\(endpoint) answered HTTP \(status): \(error.summary)",
                failureClass: error.code == "invalid_grant" ? .terminal : .misconfiguration)
        default:
            return UserSessionError(code, "\(endpoint) answered HTTP \(status)", failureClass: .transient)
        }
    }

    /// Why the strict scan refuses `body`, or `nil` when it accepts it.
    private static func refusal(of body: Data) -> StrictJSONScan.Failure? {
        do {
            try StrictJSON.check(body)
            return nil
        } catch .refused(let failure) {
            return failure
        } catch {
            return nil
        }
    }

    struct OAuthError {
        var code: String
        var errorDescription: String?
        var summary: String {
            errorDescription.map { "\(code) (\($0))" } ?? code
        }
    }

    /// The RFC 6749 §5.2 error, if the body is one (bodies the strict scan refuses have none). The description is shortened, stripped of control characters,
    /// and never repeats one of `secrets` (a server may echo what it was sent).
    static func parseError(_ body: Data, secrets: [String]) -> OAuthError? {
        guard let object = try? StrictJSON.foundationObject(body),
            let code = object["error"] as? String, !code.isEmpty
        else { return nil }
        return OAuthError(
            code: sanitize(code, secrets: secrets, limit: 64),
            errorDescription: (object["error_description"] as? String).map {
                sanitize($0, secrets: secrets, limit: 200)
            })
    }

    static func sanitize(_ text: String, secrets: [String], limit: Int) -> String {
        var text = String(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }.map(Character.init))
        for secret in secrets where !secret.isEmpty {
            text = text.replacingOccurrences(of: secret, with: "<redacted>")
        }
        if text.count > limit { text = String(text.prefix(limit)) + "…" }
        // A secret cut in half by the limit could still leak a prefix; redact again after truncation.
        for secret in secrets where secret.count >= 8 {
            for length in stride(from: secret.count - 1, through: 8, by: -1)
            where text.hasSuffix(String(secret.prefix(length)) + "…") {
                return String(text.dropLast(length + 1)) + "<redacted>…"
            }
        }
        return text
    }

    static func malformed(_ what: String) -> UserSessionError {
        UserSessionError(.malformedTokenResponse, "the token response \(what)", failureClass: .transient)
    }

    /// The credentials in a successful token response (RFC 6749 §5.1), built on `previous` (which keeps its refresh
    /// token, granted permissions and DPoP key when the response has none) or from nothing, stamped `sentAt` and
    /// `source`, and bound to `dpopKey` when one is given.
    ///
    /// - Throws: ``UserSessionError/Code/malformedTokenResponse`` (transient) for a body the strict scan refuses or
    ///   that is not a token response; ``UserSessionError/Code/dpopDowngraded`` (terminal) when the credentials are
    ///   bound to a DPoP key and the `token_type` is not `DPoP`.
    package static func parseSuccess(
        _ body: Data, previous: Credentials?, sentAt: Date, source: Credentials.Source, dpopKey: DPoPKey? = nil
    ) throws -> Credentials {
        let parsed: [String: Any]?
        do {
            parsed = try StrictJSON.foundationObject(body)
        } catch .refused(let refusal) {
            throw malformed("is \(refusal)")
        } catch {
            throw malformed("is not a JSON object")
        }
        guard let object = parsed else { throw malformed("is not a JSON object") }
        guard let accessToken = object["access_token"] as? String, !accessToken.isEmpty else {
            throw malformed("has no access_token string")
        }
        var refreshed = previous ?? Credentials(accessToken: accessToken)
        // Every field in one change: one new shared object of fields, not one per field set.
        try refreshed.change { fields in
            fields.accessToken = accessToken
            if let tokenType = object["token_type"] {
                guard let tokenType = tokenType as? String else {
                    throw malformed("has a token_type that is not a string")
                }
                fields.tokenType = tokenType
            }
            if let refreshToken = object["refresh_token"], !(refreshToken is NSNull) {
                guard let refreshToken = refreshToken as? String, !refreshToken.isEmpty else {
                    throw malformed("has a refresh_token that is not a string")
                }
                fields.refreshToken = refreshToken
            }
            if let expiresIn = object["expires_in"], !(expiresIn is NSNull) {
                guard let seconds = lifetime(expiresIn) else { throw malformed("has an invalid expires_in") }
                fields.expiresAt = sentAt.addingTimeInterval(seconds)
            } else {
                // No lifetime given: the old expiry says nothing about the new token.
                fields.expiresAt = nil
            }
            if let scope = object["scope"], !(scope is NSNull) {
                guard let scope = scope as? String else { throw malformed("has a scope that is not a string") }
                fields.grantedPermissions = Set(scope.split(separator: " ").map(String.init))
            }
            if let dpopKey { fields.dpopKey = dpopKey }
            fields.lastRefreshedAt = sentAt
            fields.source = source
        }
        // RFC 9449 §5: a client that asked for bound tokens does not use bearer ones; a server (or whoever stands in
        // between) that answers `Bearer` has not bound them, or says it has not.
        if refreshed.dpopKey != nil, refreshed.tokenType?.lowercased() != "dpop" {
            throw UserSessionError(
                .dpopDowngraded,
                "the token endpoint answered token_type "
                    + (refreshed.tokenType.map { "\"" + sanitize($0, secrets: [], limit: 32) + "\"" } ?? "none")
                    + " where DPoP was asked",
                failureClass: .terminal)
        }
        return refreshed
    }

    /// `expires_in` as seconds: a number or a numeric string, finite and not negative; clamped to 100 years.
    static func lifetime(_ value: Any) -> Double? {
        var seconds: Double?
        if let string = value as? String {
            seconds = Double(string.trimmingCharacters(in: .whitespaces))
        } else if let number = value as? NSNumber {
            seconds = number.doubleValue
        }
        guard let seconds, seconds.isFinite, seconds >= 0 else { return nil }
        return min(seconds, maximumLifetime)
    }
}
