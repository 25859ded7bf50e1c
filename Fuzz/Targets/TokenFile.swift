import Foundation

/// Fuzz target (see Fuzz/Dispatch.swift): the ``FileTokenStore`` file format (`TokenFileCoding.decode`), as a
/// token file and as a current-identifier file.
///
/// Any input must decode or throw a ``UserSessionError`` with code `storeCorrupt` or `unsupportedFormatVersion`. A
/// decoded token file must survive a round trip: encoding it and decoding the result gives an equal envelope.
func fuzzTokenFile(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    for format in [FileTokenStore.tokenFileFormat, FileTokenStore.currentIdentifierFileFormat] {
        do {
            let envelope = try TokenFileCoding.decode(bytes, format: format, file: "the fuzzed file")
            let again = try TokenFileCoding.decode(
                TokenFileCoding.encode(envelope), format: format, file: "the re-encoded file")
            if again.identifier != envelope.identifier || again.session != envelope.session
                || again.version != envelope.version
            {
                fatalError("fuzz: a decoded token file does not survive a round trip")
            }
        } catch let error as UserSessionError {
            if error.code != .storeCorrupt, error.code != .unsupportedFormatVersion {
                fatalError("fuzz: unexpected error code \(error.code)")
            }
        } catch {
            fatalError("fuzz: untyped error \(type(of: error))")
        }
    }
    return 0
}
