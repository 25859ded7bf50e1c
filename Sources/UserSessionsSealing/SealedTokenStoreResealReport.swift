#if Sealing
/// What ``SealedTokenStore/resealAll()`` did, identifier by identifier (identifiers are not secret; no token is
/// here).
public struct SealedTokenStoreResealReport: Sendable, Hashable {
    /// Records opened with an older key (or found in the clear, with
    /// ``SealedTokenStore/acceptsUnsealedRecords``) and sealed with the current one.
    public var resealed: [String]
    /// Records already sealed with the current key (or holding no credentials), left as they were.
    public var alreadyCurrent: [String]
    /// Records that do not open (see ``SealedRecordProblem``), kept as they were: retiring the key they name would
    /// lose them.
    public var unopenable: [String]
    /// Records another process wrote again each time they were read to be sealed again (over a
    /// `CoordinatedTokenStore`), left to their writers: run ``SealedTokenStore/resealAll()`` again before retiring
    /// a key.
    public var changedElsewhere: [String]

    /// Creates a report.
    public init(
        resealed: [String] = [], alreadyCurrent: [String] = [], unopenable: [String] = [],
        changedElsewhere: [String] = []
    ) {
        self.resealed = resealed
        self.alreadyCurrent = alreadyCurrent
        self.unopenable = unopenable
        self.changedElsewhere = changedElsewhere
    }

    /// Whether every stored record is now sealed with the current key, so the older keys can be retired.
    public var isComplete: Bool { unopenable.isEmpty && changedElsewhere.isEmpty }
}
#endif
