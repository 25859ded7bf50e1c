/// Turns a session identifier into a file name that cannot traverse paths.
///
/// PLACEHOLDER until the file store's encoding lands; then both use one.
enum IdentifierEncoding {
    static func fileName(for identifier: String) throws -> String {
        guard !identifier.isEmpty, !identifier.utf8.contains(0) else {
            throw UserSessionError(.invalidIdentifier, "a session identifier must be non-empty and contain no NUL")
        }
        let hex = identifier.utf8.map { byte in
            let digits = Array("0123456789abcdef")
            return String([digits[Int(byte >> 4)], digits[Int(byte & 0xf)]])
        }.joined()
        return "s-" + hex.prefix(200)
    }
}
