/// The package's own JSON form of one stored session, for the stores in the package's other modules (the
/// PostgreSQL store keeps it in a `bytea` column): the same versioned envelope as a ``FileTokenStore`` file,
/// `{"format": "swift-user-sessions.token", "version": 1, "identifier": "…", "session": {…}}` with sorted keys,
/// decoded by the same strict reader, so a record is portable between the stores.
package enum StoredSessionRecord {
    /// The format version this release writes and the newest it reads.
    package static let formatVersion = FileTokenStore.fileFormatVersion

    /// The bytes of `session` stored under `identifier`.
    ///
    /// - Throws: ``UserSessionError/Code/storeFailure`` when the session cannot be encoded.
    package static func encode(_ session: StoredSession, identifier: String) throws -> [UInt8] {
        try TokenFileCoding.encode(
            TokenFileEnvelope(
                format: FileTokenStore.tokenFileFormat,
                version: formatVersion,
                identifier: identifier,
                session: session
            )
        )
    }

    /// Decodes the bytes of a record stored under `identifier`; `label` names the record in error messages.
    ///
    /// - Throws: ``UserSessionError/Code/storeCorrupt`` for bytes that are not a complete record of this format, or
    ///   that record another identifier or no session; ``UserSessionError/Code/unsupportedFormatVersion`` for a
    ///   record written by a newer release. Never traps, whatever the bytes.
    package static func decode(_ bytes: [UInt8], identifier: String, label: String) throws -> StoredSession {
        let envelope = try TokenFileCoding.decode(bytes, format: FileTokenStore.tokenFileFormat, file: label)
        guard ExactIdentifier.areEqual(envelope.identifier, identifier) else {
            throw UserSessionError(.storeCorrupt, "\(label) records a different identifier")
        }
        guard let session = envelope.session else {
            throw UserSessionError(.storeCorrupt, "\(label) holds no session")
        }
        return session
    }

    /// Checks that `identifier` is usable as a key, with the rules every store of the package applies.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier`` when it is empty, contains NUL, or is longer than
    ///   64 KiB of UTF-8.
    package static func validate(identifier: String) throws {
        try IdentifierEncoding.validate(identifier)
    }
}
