#if OpenIDConnect
import Crypto
import Foundation

/// The JSON form of what the shared state stores keep (dates as seconds since 1970), and the hash that names a
/// `state` or a `jti` without showing it.
enum StateStoreCoding {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return decoder
    }()

    /// The SHA-256 of `key`'s UTF-8 bytes.
    static func hash(_ key: String) -> [UInt8] {
        Array(SHA256.hash(data: Data(key.utf8)))
    }
}
#endif
