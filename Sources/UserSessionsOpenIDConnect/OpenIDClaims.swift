#if OpenIDConnect
import Foundation
import JWTKit
import UserSessions

/// One JSON value of a token's claims.
///
/// A public view of the core's parsed JSON value, which reads and writes it: a number is a `Double` here whether or
/// not it was written with a fraction.
public enum ClaimValue: Sendable, Hashable, Codable {
    /// A string.
    case string(String)
    /// A number.
    case number(Double)
    /// `true` or `false`.
    case bool(Bool)
    /// An array.
    case array([ClaimValue])
    /// An object.
    case object([String: ClaimValue])
    /// `null`.
    case null

    /// Decodes any JSON value (through the core's parsed JSON value).
    public init(from decoder: any Decoder) throws {
        self.init(try ParsedJSON(from: decoder))
    }

    /// Encodes the JSON value (through the core's parsed JSON value).
    public func encode(to encoder: any Encoder) throws {
        try parsed.encode(to: encoder)
    }

    /// The claim value of the core's `value`.
    init(_ value: ParsedJSON) {
        switch value {
        case .null: self = .null
        case .bool(let bool): self = .bool(bool)
        case .integer(let integer): self = .number(Double(integer))
        case .number(let number): self = .number(number)
        case .string(let string): self = .string(string)
        case .array(let array): self = .array(array.map(ClaimValue.init))
        case .object(let object): self = .object(object.mapValues(ClaimValue.init))
        }
    }

    /// The core's value of this claim value.
    var parsed: ParsedJSON {
        switch self {
        case .null: .null
        case .bool(let bool): .bool(bool)
        case .number(let number): .number(number)
        case .string(let string): .string(string)
        case .array(let array): .array(array.map(\.parsed))
        case .object(let object): .object(object.mapValues(\.parsed))
        }
    }

    /// The string, if this is one.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The number, if this is one.
    public var numberValue: Double? {
        if case .number(let value) = self { return value }
        return nil
    }
}

/// The claims of a validated token (an ID token, a logout token or a userinfo answer), by name.
///
/// Its descriptions show only the claim names: claims may hold personal data.
public struct OpenIDClaims: Sendable, Hashable, CustomStringConvertible {
    /// Every claim.
    public var values: [String: ClaimValue]

    /// Creates claims.
    public init(_ values: [String: ClaimValue]) { self.values = values }

    /// The claim `name`.
    public subscript(_ name: String) -> ClaimValue? { values[name] }

    /// `sub`: the user at the provider (never reassigned).
    public var subject: String? { values["sub"]?.stringValue }
    /// `iss`.
    public var issuer: String? { values["iss"]?.stringValue }
    /// `sid`: the provider's session, if sent.
    public var sessionID: String? { values["sid"]?.stringValue }
    /// `email`, if sent.
    public var email: String? { values["email"]?.stringValue }
    /// `name`, if sent.
    public var name: String? { values["name"]?.stringValue }
    /// `aud` as a list (a single string is a list of one).
    public var audience: [String] {
        switch values["aud"] {
        case .string(let value): return [value]
        case .array(let values): return values.compactMap(\.stringValue)
        default: return []
        }
    }

    /// The claim `name` as a date (a JSON number of seconds since 1970), if it is one.
    public func date(_ name: String) -> Date? {
        values[name]?.numberValue.flatMap { $0.isFinite ? Date(timeIntervalSince1970: $0) : nil }
    }

    /// The claim names, never their values.
    public var description: String { "OpenIDClaims(\(values.keys.sorted().joined(separator: ", ")))" }
}

/// The payload type given to jwt-kit: it decodes every claim and leaves their checks to the validator.
struct ClaimsPayload: JWTPayload {
    var values: [String: ClaimValue]

    init(from decoder: any Decoder) throws {
        values = try decoder.singleValueContainer().decode([String: ClaimValue].self)
    }

    /// The claims of a payload's JSON, read with the package's reader: a repeated claim is refused (decoders keep
    /// one of them, and two readers of one token must not disagree on who it names).
    init(json: Data) throws {
        values = try JSONReader.read(json) { reader in
            guard case .object(let members) = try reader.readParsedJSON() else { throw reader.failure() }
            return members.mapValues(ClaimValue.init)
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(values)
    }

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// The JSON decoder of the provider's key collections: jwt-kit reads a token's header with Foundation's decoder as
/// it always does, and hands the claims to ``ClaimsPayload/init(json:)``, which reads them in one pass with no
/// decoder (through `JSONDecoder`, dictionary of claims cost more than an RS256 signature check).
struct ClaimsJSONDecoder: JWTJSONDecoder {
    private let fallback: any JWTJSONDecoder = .defaultForJWT

    func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        if type == ClaimsPayload.self, let payload = try ClaimsPayload(json: data) as? T { return payload }
        return try fallback.decode(type, from: data)
    }
}
#endif
