import Foundation

/// Turns a sign-in response into a ``UserSessionPrototype``. See
/// ``UserSessionPrototype/init(signInResponse:receivedAt:)`` for the accepted shape.
///
/// Every failure is a ``UserSessionError`` with code ``UserSessionError/Code/malformedSignInResponse`` whose
/// `jsonPath` names the offending field (`nil` when the document as a whole is unusable). Messages name JSON types,
/// never values, because a value may be a token.
struct SignInResponseParser {
    /// The longest accepted `expires_in`: ten years, in seconds.
    static let maximumExpiresIn: TimeInterval = 10 * 365.25 * 86_400

    /// Where token fields are looked for, in order; the first object holding an `access_token` wins.
    static let tokenContainerPaths: [[String]] = [["result", "token"], ["result", "credentials"], ["result"], []]

    /// When the response was received; `expires_in` counts from here.
    var receivedAt: Date

    /// The member names the parser reads: a duplicate's path is reported only when it is made of these (any other
    /// name comes from the server and could be anything, a token included).
    static let knownNames: Set<String> = [
        "result", "user", "id", "email", "name", "token", "credentials", "access_token", "refresh_token", "token_type",
        "expires_in", "scope", "declined_scope", "declined_permissions",
    ]

    func parse(_ data: Data) throws -> UserSessionPrototype {
        let document: ParsedJSON
        do {
            document = try StrictJSON.parse(data)
        } catch .refused(let failure) {
            throw Self.refused(failure)
        } catch .unreadable(let error) {
            throw UserSessionError(
                .malformedSignInResponse,
                "the sign-in response is not valid JSON, or is nested too deeply",
                underlying: error
            )
        }
        guard let root = document.objectValue else {
            throw UserSessionError(
                .malformedSignInResponse,
                "the sign-in response is \(document.typeName), expected an object"
            )
        }
        let result = try requiredObject(root, "result", parent: "")
        let user = try requiredObject(result, "user", parent: "result")
        let userInfo = try parseUser(user, path: "result.user")
        let credentials = try parseCredentials(root)
        return UserSessionPrototype(identifier: userInfo.id, userInfo: userInfo, credentials: credentials)
    }

    // MARK: - User

    private func parseUser(_ user: [String: ParsedJSON], path: String) throws -> UserInfo {
        let idPath = ParsedJSON.path(path, "id")
        let id: String
        switch user["id"] {
        case .string(let string):
            id = string
        case .integer(let integer):
            id = String(integer)
        case nil:
            throw malformed("missing field", at: idPath)
        case .some(let other):
            throw malformed("expected a string or an integer, found \(other.typeName)", at: idPath)
        }
        guard !id.isEmpty else { throw malformed("the user id is empty", at: idPath) }
        guard !id.utf8.contains(0) else { throw malformed("the user id contains NUL", at: idPath) }

        let email = try optionalString(user, "email", parent: path)
        let name = try optionalString(user, "name", parent: path)
        // Other string members travel along as attributes; non-string members are ignored.
        var attributes: [String: String] = [:]
        for (key, value) in user where !["id", "email", "name"].contains(key) {
            if case .string(let string) = value { attributes[key] = string }
        }
        return UserInfo(id: id, email: email, name: name, attributes: attributes)
    }

    // MARK: - Credentials

    private func parseCredentials(_ root: [String: ParsedJSON]) throws -> Credentials? {
        guard let (container, path) = try tokenContainer(root) else { return nil }
        let accessTokenPath = ParsedJSON.path(path, "access_token")
        guard case .string(let accessToken) = container["access_token"] else {
            let typeName = container["access_token"]?.typeName ?? "nothing"
            throw malformed("expected a string, found \(typeName)", at: accessTokenPath)
        }
        guard !accessToken.isEmpty else { throw malformed("the access token is empty", at: accessTokenPath) }

        let refreshToken = try optionalString(container, "refresh_token", parent: path)
        let tokenType = try optionalString(container, "token_type", parent: path)
        let expiresIn = try parseExpiresIn(container["expires_in"], path: ParsedJSON.path(path, "expires_in"))
        let granted = try parsePermissions(container["scope"], path: ParsedJSON.path(path, "scope"))
        var declined = try parsePermissions(container["declined_scope"], path: ParsedJSON.path(path, "declined_scope"))
        declined.formUnion(
            try parsePermissions(container["declined_permissions"], path: ParsedJSON.path(path, "declined_permissions"))
        )
        return Credentials(
            accessToken: accessToken,
            refreshToken: refreshToken.flatMap { $0.isEmpty ? nil : $0 },
            tokenType: tokenType ?? "Bearer",
            expiresAt: expiresIn.map { receivedAt.addingTimeInterval($0) },
            lastRefreshedAt: receivedAt,
            source: .signIn,
            grantedPermissions: granted,
            declinedPermissions: declined
        )
    }

    /// The first of ``tokenContainerPaths`` that is an object with a non-null `access_token`, and its path.
    private func tokenContainer(_ root: [String: ParsedJSON]) throws -> ([String: ParsedJSON], String)? {
        for components in Self.tokenContainerPaths {
            var current: [String: ParsedJSON]? = root
            var path = ""
            for component in components {
                guard let members = current else { break }
                let next = ParsedJSON.path(path, component)
                switch members[component] {
                case .object(let nested): current = nested
                case nil, .null: current = nil
                case .some(let other): throw malformed("expected an object, found \(other.typeName)", at: next)
                }
                path = next
            }
            if let current, let accessToken = current["access_token"], accessToken != .null {
                return (current, path)
            }
        }
        return nil
    }

    private func parseExpiresIn(_ value: ParsedJSON?, path: String) throws -> TimeInterval? {
        let seconds: Double
        switch value {
        case nil, .null:
            return nil
        case .integer(let integer):
            seconds = Double(integer)
        case .number(let number):
            seconds = number
        case .string(let string):
            // Only plain decimal notation: `Double("nan")`, `Double("inf")` and `Double("0x10")` would parse too.
            let allowed = Set("0123456789.-")
            guard !string.isEmpty, string.count <= 32, string.allSatisfy(allowed.contains),
                let parsed = Double(string)
            else { throw malformed("expected a number of seconds, found a non-numeric string", at: path) }
            seconds = parsed
        case .some(let other):
            throw malformed("expected a number of seconds, found \(other.typeName)", at: path)
        }
        guard seconds.isFinite else { throw malformed("the expiry is not a finite number", at: path) }
        guard seconds >= 0 else { throw malformed("the expiry is negative", at: path) }
        guard seconds <= Self.maximumExpiresIn else { throw malformed("the expiry is more than ten years", at: path) }
        return seconds
    }

    /// A space-separated scope string (RFC 6749 §3.3) or an array of strings.
    private func parsePermissions(_ value: ParsedJSON?, path: String) throws -> Set<String> {
        switch value {
        case nil, .null:
            return []
        case .string(let string):
            return Set(string.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).map(String.init))
        case .array(let elements):
            var permissions: Set<String> = []
            for (index, element) in elements.enumerated() {
                guard case .string(let permission) = element else {
                    throw malformed("expected a string, found \(element.typeName)", at: "\(path)[\(index)]")
                }
                if !permission.isEmpty { permissions.insert(permission) }
            }
            return permissions
        case .some(let other):
            throw malformed("expected a space-separated string, found \(other.typeName)", at: path)
        }
    }

    // MARK: - Field access

    private func requiredObject(
        _ members: [String: ParsedJSON],
        _ key: String,
        parent: String
    ) throws -> [String: ParsedJSON] {
        let path = ParsedJSON.path(parent, key)
        switch members[key] {
        case .object(let nested): return nested
        case nil: throw malformed("missing field", at: path)
        case .some(let other): throw malformed("expected an object, found \(other.typeName)", at: path)
        }
    }

    private func optionalString(_ members: [String: ParsedJSON], _ key: String, parent: String) throws -> String? {
        switch members[key] {
        case nil, .null: return nil
        case .string(let string): return string
        case .some(let other):
            throw malformed("expected a string, found \(other.typeName)", at: ParsedJSON.path(parent, key))
        }
    }

    /// The error for a document the strict scan refused: duplicate members (with the duplicate's `jsonPath` when it
    /// is made of known names), too-deep nesting or invalid syntax.
    static func refused(_ failure: StrictJSONScan.Failure) -> UserSessionError {
        switch failure.problem {
        case .duplicateMember:
            let path = StrictJSONScan.path(failure.path, ifEveryNameIsIn: knownNames)
            return UserSessionError(
                .malformedSignInResponse,
                "sign-in response: \(failure)" + (path.map { " at \($0)" } ?? ""),
                jsonPath: path
            )
        case .tooDeep, .invalidSyntax:
            return UserSessionError(.malformedSignInResponse, "the sign-in response is \(failure)")
        }
    }

    private func malformed(_ message: String, at path: String) -> UserSessionError {
        UserSessionError(.malformedSignInResponse, "sign-in response: \(message) at \(path)", jsonPath: path)
    }
}
