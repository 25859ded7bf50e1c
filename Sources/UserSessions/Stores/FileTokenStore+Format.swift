import Foundation

extension FileTokenStore {
    /// The `format` member of a token file.
    static let tokenFileFormat = "swift-user-sessions.token"
    /// The `format` member of the current-identifier file.
    static let currentIdentifierFileFormat = "swift-user-sessions.current-identifier"
    /// The version this release writes; files with a newer version are rejected with
    /// ``UserSessionError/Code/unsupportedFormatVersion``. Version 2 added the record's `revision`; a version-1
    /// file (which has none) reads as revision 1.
    static let fileFormatVersion = 2
    /// Files larger than this are not read (they cannot be ours): 8 MiB.
    static let maximumFileSize = 8 * 1024 * 1024
}

/// The on-disk form, version 2:
///
/// ```json
/// {"format": "swift-user-sessions.token", "version": 2, "identifier": "…", "revision": 7, "session": {…}}
/// ```
///
/// `revision` grows with every write of the identifier's record (see ``CoordinatedTokenStore``); version-1 files
/// have none and read as revision 1.
///
/// `session` is ``StoredSession``'s `Codable` form. Dates are JSON numbers of seconds since
/// 2001-01-01T00:00:00Z (Foundation's reference date), written in the shortest form that reads back to the same
/// `Date`, so a reloaded session equals the saved one exactly. Keys are sorted, so equal sessions give equal bytes.
/// The current-identifier file has the same shape with the other `format` and no `session`.
struct TokenFileEnvelope: Codable {
    var format: String
    var version: Int
    var identifier: String
    var revision: UInt64? = nil
    var session: StoredSession?
}

/// The first thing read from a file, before trusting the rest.
private struct TokenFileHeader: Decodable {
    var format: String?
    var version: Int?
}

enum TokenFileCoding {
    static func encode(_ envelope: TokenFileEnvelope) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .deferredToDate
        do {
            return Array(try encoder.encode(envelope))
        } catch {
            throw UserSessionError(.storeFailure, "cannot encode the session", underlying: error)
        }
    }

    /// Decodes a file's bytes, checking format and version first.
    ///
    /// - Throws: ``UserSessionError/Code/storeCorrupt`` for bytes that are not a complete file of the expected
    ///   format (including duplicate members and nesting deeper than 128 levels); ``UserSessionError/Code/unsupportedFormatVersion`` for a newer version (of the file or of the
    ///   credentials inside).
    static func decode(_ bytes: [UInt8], format: String, file: String) throws -> TokenFileEnvelope {
        // Duplicate members would be resolved silently (one of them wins); this release never writes them.
        do {
            try StrictJSON.check(bytes)
        } catch {
            guard case .refused(let refusal) = error else {
                throw UserSessionError(.storeCorrupt, "\(file) is not valid JSON (corrupt or truncated)")
            }
            throw UserSessionError(.storeCorrupt, "\(file) is \(refusal) (corrupt, truncated or not ours)")
        }
        let data = Data(bytes)
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .deferredToDate
        let header: TokenFileHeader
        do {
            header = try decoder.decode(TokenFileHeader.self, from: data)
        } catch {
            throw UserSessionError(.storeCorrupt, "\(file) is not valid JSON (corrupt or truncated)", underlying: error)
        }
        guard header.format == format else {
            throw UserSessionError(.storeCorrupt, "\(file) is not a file of format \(format)")
        }
        guard let version = header.version, version >= 1 else {
            throw UserSessionError(.storeCorrupt, "\(file) has no valid format version")
        }
        guard version <= FileTokenStore.fileFormatVersion else {
            throw UserSessionError(
                .unsupportedFormatVersion,
                "\(file) has format version \(version); this release reads up to \(FileTokenStore.fileFormatVersion)"
            )
        }
        do {
            return try decoder.decode(TokenFileEnvelope.self, from: data)
        } catch let error as UserSessionError {
            throw error
        } catch {
            throw UserSessionError(.storeCorrupt, "\(file) has missing or mistyped fields", underlying: error)
        }
    }
}
