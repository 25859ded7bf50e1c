#if OpenIDConnect
import Foundation
import JWTKit

/// One JSON value of a token's claims.
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

    /// Decodes any JSON value.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([ClaimValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: ClaimValue].self))
        }
    }

    /// Encodes the JSON value.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        case .null: try container.encodeNil()
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

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(values)
    }

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
#endif
