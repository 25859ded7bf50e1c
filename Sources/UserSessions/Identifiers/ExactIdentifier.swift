import Foundation

/// A session identifier that compares and hashes by its UTF-8 bytes, for keying dictionaries.
///
/// Swift's `String` equality is canonical equivalence: `"caf\u{E9}"` (NFC) and `"cafe\u{301}"` (NFD) are equal
/// strings, and so are the Kelvin sign and `K`. The package never normalizes identifiers: two identifiers are the
/// same only when their UTF-8 bytes are equal. The file and remote stores name their records from those bytes, so
/// everything that keys by identifier in memory (``UserSessionRegistry``, ``InMemoryTokenStore``) uses this wrapper
/// to agree with them; a `[String: …]` dictionary would merge two users whose identifiers merely look alike.
struct ExactIdentifier: Hashable, Sendable {
    /// The identifier, unchanged.
    let value: String

    init(_ value: String) {
        self.value = value
    }

    /// Whether `lhs` and `rhs` are the same identifier: equal UTF-8 bytes.
    static func areEqual(_ lhs: String, _ rhs: String) -> Bool {
        let (left, right) = (lhs.utf8, rhs.utf8)
        guard left.count == right.count else { return false }
        // Native strings are contiguous UTF-8: one memory comparison. Bridged ones are walked byte by byte.
        let compared = left.withContiguousStorageIfAvailable { leftBytes in
            right.withContiguousStorageIfAvailable { rightBytes in
                guard let leftStart = leftBytes.baseAddress, let rightStart = rightBytes.baseAddress else {
                    return leftBytes.count == rightBytes.count
                }
                return memcmp(leftStart, rightStart, leftBytes.count) == 0
            }
        }
        return (compared ?? nil) ?? left.elementsEqual(right)
    }

    static func == (lhs: ExactIdentifier, rhs: ExactIdentifier) -> Bool {
        areEqual(lhs.value, rhs.value)
    }

    func hash(into hasher: inout Hasher) {
        let utf8 = value.utf8
        hasher.combine(utf8.count)
        let hashed: Void? = utf8.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        if hashed == nil {
            for byte in utf8 { hasher.combine(byte) }
        }
    }
}
