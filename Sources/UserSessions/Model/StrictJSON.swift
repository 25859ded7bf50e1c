import Foundation

/// The one entry point for reading untrusted JSON: ``StrictJSONScan`` first, then a decoder.
///
/// Every parser of a response, a stored record or a file goes through here, so no document reaches a decoder
/// without the scan that refuses duplicate members, nesting deeper than 128 levels and anything that is not JSON.
/// Each caller turns a ``Failure`` into its own ``UserSessionError`` (its own code and wording).
package enum StrictJSON {
    /// Why a document could not be read.
    package enum Failure: Error {
        /// The strict scan refused it; the scan's failure names the problem without quoting the document.
        case refused(StrictJSONScan.Failure)
        /// The scan accepted it, but the decoder could not read it (a wrong shape, a number out of range…).
        case unreadable(any Error)
    }

    /// Scans `data` and parses it into a ``ParsedJSON`` tree.
    static func parse(_ data: Data) throws(Failure) -> ParsedJSON {
        try decode(ParsedJSON.self, from: data)
    }

    /// Scans `data` and decodes a `Value` from it with `decoder`.
    package static func decode<Value: Decodable>(
        _ type: Value.Type, from data: Data, using decoder: JSONDecoder = JSONDecoder()
    ) throws(Failure) -> Value {
        try check(data)
        do {
            return try decoder.decode(type, from: data)
        } catch {
            throw .unreadable(error)
        }
    }

    /// Scans `data` and returns its top-level object as Foundation values, or `nil` when the document is JSON but
    /// not an object.
    package static func foundationObject(_ data: Data) throws(Failure) -> [String: Any]? {
        try check(data)
        do {
            return try JSONSerialization.jsonObject(with: data) as? [String: Any]
        } catch {
            throw .unreadable(error)
        }
    }

    /// Only the scan, for callers that decode the same document more than once (a header, then the whole).
    static func check(_ data: Data) throws(Failure) {
        do {
            try StrictJSONScan.check(data)
        } catch {
            throw .refused(error)
        }
    }

    /// Only the scan, of bytes read from a file; see ``check(_:)-(Data)``.
    static func check(_ bytes: [UInt8]) throws(Failure) {
        do {
            try StrictJSONScan.check(bytes)
        } catch {
            throw .refused(error)
        }
    }
}
