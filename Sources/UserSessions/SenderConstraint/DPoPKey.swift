import Foundation

/// The private key a session's DPoP proofs (RFC 9449) are signed with: it belongs to the credentials it binds.
///
/// It is made at sign-in and kept in ``Credentials/dpopKey``, so every token store keeps it beside the tokens (sealed
/// when the store is sealed): a restart, a restore on another instance of a fleet and every refresh present proofs
/// signed with the same key, as the authorization server requires of a bound refresh token.
///
/// The core package has no cryptography: ``privateKey`` is the representation the ``DPoPProofSigner`` that made the
/// key reads back (the `OpenIDConnect` trait's `DPoPSigner` uses swift-crypto's raw representation for ES256 and
/// EdDSA, and DER for RS256). A secret: its descriptions show only the algorithm.
public struct DPoPKey: Sendable, Hashable, Codable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// The signature algorithm of a DPoP key, as a JOSE `alg`.
    public struct Algorithm: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        /// ECDSA with P-256 and SHA-256: the default, small and fast.
        public static let es256 = Algorithm(rawValue: "ES256")
        /// Ed25519.
        public static let edDSA = Algorithm(rawValue: "EdDSA")
        /// RSASSA-PKCS1-v1_5 with SHA-256 and a 2048-bit key, for providers that accept nothing else.
        public static let rs256 = Algorithm(rawValue: "RS256")
        public var description: String { rawValue }
    }

    /// The key's algorithm.
    public var algorithm: Algorithm { storage.algorithm }
    /// The private key, in the representation of the signer that made it. A secret.
    public var privateKey: [UInt8] { storage.privateKey }

    /// One reference, so that credentials without a key pay a word for it, and credentials with one copy a word.
    private let storage: Storage

    private final class Storage: Sendable {
        let algorithm: Algorithm
        let privateKey: [UInt8]

        init(algorithm: Algorithm, privateKey: [UInt8]) {
            self.algorithm = algorithm
            self.privateKey = privateKey
        }
    }

    /// A key of `algorithm` whose private half is `privateKey`.
    public init(algorithm: Algorithm, privateKey: [UInt8]) {
        storage = Storage(algorithm: algorithm, privateKey: privateKey)
    }

    /// Equal when the algorithm and the private key are.
    public static func == (lhs: DPoPKey, rhs: DPoPKey) -> Bool {
        lhs.storage === rhs.storage
            || (lhs.algorithm == rhs.algorithm && lhs.privateKey == rhs.privateKey)
    }

    /// Hashes what ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(algorithm)
        hasher.combine(privateKey)
    }

    /// The algorithm only: `DPoPKey(ES256, <redacted>)`.
    public var description: String { "DPoPKey(\(algorithm), <redacted>)" }

    /// Same as ``description``.
    public var debugDescription: String { description }

    /// A mirror without the private key, for `dump` and `String(reflecting:)`.
    public var customMirror: Mirror {
        Mirror(self, children: ["algorithm": algorithm.rawValue, "privateKey": "<redacted>"], displayStyle: .struct)
    }

    /// The stored form: the algorithm, a colon, and the private key in base64url without padding.
    package var storedForm: String {
        algorithm.rawValue + ":" + CanonicalBase64.encodeURL(privateKey)
    }

    /// The key in `storedForm`, or `nil` for text that is not one (the key must be base64url in its one canonical
    /// spelling, ``CanonicalBase64``).
    package init?(storedForm: String) {
        guard let colon = storedForm.firstIndex(of: ":") else { return nil }
        let algorithm = storedForm[..<colon]
        let encoded = storedForm[storedForm.index(after: colon)...]
        guard !algorithm.isEmpty, !encoded.isEmpty, let bytes = CanonicalBase64.decodeURL(encoded.utf8) else {
            return nil
        }
        self.init(algorithm: Algorithm(rawValue: String(algorithm)), privateKey: Array(bytes))
    }

    /// Reads the stored form (a string).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        guard let key = DPoPKey(storedForm: try container.decode(String.self)) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a DPoP key's stored form")
        }
        self = key
    }

    /// Writes the stored form: the algorithm, a colon, and the private key in base64url.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(storedForm)
    }
}
