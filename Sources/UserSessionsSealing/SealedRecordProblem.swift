#if Sealing
/// Why a ``SealedTokenStore`` could not open a record: the `underlying` error of the
/// `UserSessionError` (code `UserSessionError.Code.storeCorrupt`) that reports it.
///
/// The record is kept as it is in every case; nothing here contains key material or plaintext.
public enum SealedRecordProblem: Error, Sendable, Hashable, CustomStringConvertible {
    /// The record was sealed with the key of this identifier, which is not in the key ring (a key retired too
    /// early, or a process started without the newest key).
    case unknownKey(id: String)
    /// The record did not authenticate: it was altered, or it was sealed for another identifier, namespace or
    /// format version (a record copied from another user's key, row or file), or with another key of that name.
    case authenticationFailed
    /// The secret part is not a sealed record of this format (truncated, or not base64).
    case malformed
    /// The record holds credentials in the clear where a sealed record was expected (written without sealing).
    case notSealed

    public var description: String {
        switch self {
        case .unknownKey(let id): "sealed with key \"\(id)\", which is not in the key ring"
        case .authenticationFailed:
            "failed authentication: altered, or sealed for another identifier or namespace, or under another key"
        case .malformed: "not a well-formed sealed record"
        case .notSealed: "holds credentials that are not sealed"
        }
    }
}
#endif
