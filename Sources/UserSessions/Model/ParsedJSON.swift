import Foundation

/// A JSON document parsed strictly, for reading untrusted responses without `Any` casts.
///
/// Built on `JSONDecoder`, which rejects documents nested more than a few hundred levels deep with an error (no stack
/// overflow), rejects numbers that do not fit a `Double`, and keeps booleans apart from numbers (`true` is never `1`).
/// `JSONDecoder` silently keeps one of duplicate members: parse untrusted documents with ``StrictJSON/parse(_:)``,
/// which runs ``StrictJSONScan`` first to refuse them (and nesting deeper than 128 levels).
///
/// The package's one JSON value: the OpenID Connect module's public `ClaimValue` is read and written through it.
package enum ParsedJSON: Sendable, Hashable {
    case null
    case bool(Bool)
    /// A number written without a fraction that fits an `Int64`.
    case integer(Int64)
    /// Any other finite number.
    case number(Double)
    case string(String)
    case array([ParsedJSON])
    case object([String: ParsedJSON])

    /// Parses `data`; throws the decoder's error for invalid JSON, too-deep nesting or unrepresentable numbers.
    init(parsing data: Data) throws {
        self = try JSONDecoder().decode(ParsedJSON.self, from: data)
    }

    /// The object's members, or `nil` when this is not an object.
    var objectValue: [String: ParsedJSON]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// The string, or `nil` when this is not a string.
    var stringValue: String? {
        if case .string(let string) = self { return string }
        return nil
    }

    /// A short name of the value's JSON type, for error messages (never the value itself, which may be a secret).
    var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .integer, .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

extension ParsedJSON: Decodable {
    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let bool = try? container.decode(Bool.self) {
            self = .bool(bool)
        } else if let integer = try? container.decode(Int64.self) {
            self = .integer(integer)
        } else if let number = try? container.decode(Double.self) {
            self = .number(number)
        } else if let string = try? container.decode(String.self) {
            self = .string(string)
        } else if let array = try? container.decode([ParsedJSON].self) {
            self = .array(array)
        } else {
            self = .object(try container.decode([String: ParsedJSON].self))
        }
    }
}

extension ParsedJSON: Encodable {
    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let bool): try container.encode(bool)
        case .integer(let integer): try container.encode(integer)
        case .number(let number): try container.encode(number)
        case .string(let string): try container.encode(string)
        case .array(let array): try container.encode(array)
        case .object(let object): try container.encode(object)
        }
    }
}

extension ParsedJSON {
    /// Joins JSON path components as `result.user.id`; the root is the empty path.
    static func path(_ parent: String, _ key: String) -> String {
        parent.isEmpty ? key : "\(parent).\(key)"
    }
}
