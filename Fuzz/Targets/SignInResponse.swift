import Foundation

/// Fuzz target (see Fuzz/Dispatch.swift): the sign-in response parser,
/// ``UserSessionPrototype/init(signInResponse:receivedAt:)``.
///
/// Any input must either parse or throw a ``UserSessionError`` with code `malformedSignInResponse`; a successful
/// parse must give a usable identifier and, when credentials are present, a non-empty access token. When both
/// ``StrictJSONScan`` and ``ParsedJSON`` accept the input, they must count the same number of object members (the
/// scan sees every member name exactly as the decoder does, so no duplicate can slip past it).
func fuzzSignInResponse(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let data = Data(bytes: start, count: count)
    do {
        let prototype = try UserSessionPrototype(signInResponse: data, receivedAt: Date(timeIntervalSince1970: 0))
        if prototype.identifier.isEmpty || prototype.identifier.utf8.contains(0) {
            fatalError("fuzz: parsed an empty or NUL identifier")
        }
        if let credentials = prototype.credentials, credentials.accessToken.isEmpty {
            fatalError("fuzz: parsed an empty access token")
        }
    } catch let error as UserSessionError {
        if error.code != .malformedSignInResponse { fatalError("fuzz: unexpected error code \(error.code)") }
    } catch {
        fatalError("fuzz: untyped error \(type(of: error))")
    }
    if let members = try? StrictJSONScan.check(data), let parsed = try? ParsedJSON(parsing: data),
        members != memberCount(parsed)
    {
        fatalError("fuzz: the scan and the decoder disagree on the members")
    }
    return 0
}

private func memberCount(_ value: ParsedJSON) -> Int {
    switch value {
    case .array(let elements): elements.reduce(0) { $0 + memberCount($1) }
    case .object(let members): members.count + members.values.reduce(0) { $0 + memberCount($1) }
    default: 0
    }
}
