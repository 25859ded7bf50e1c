import Foundation

/// What a test plants in place of a store's record file.
public enum PlantedFile: String, Sendable, CaseIterable {
    /// A symbolic link to a copy of the record outside the store's directory (the store must not follow it).
    case symbolicLink = "symbolic link"
    /// A file larger than the store reads (70,000 bytes).
    case oversized

    /// Moves the record at `file` to `outside`, puts this kind of planted file where it was, and returns the
    /// record's bytes (what `outside` must still hold afterwards).
    public func plant(at file: URL, outside: URL) throws -> Data {
        let record = try Data(contentsOf: file)
        try record.write(to: outside)
        try FileManager.default.removeItem(at: file)
        switch self {
        case .symbolicLink: try FileManager.default.createSymbolicLink(at: file, withDestinationURL: outside)
        case .oversized: try Data(repeating: 0x20, count: 70_000).write(to: file)
        }
        return record
    }
}
