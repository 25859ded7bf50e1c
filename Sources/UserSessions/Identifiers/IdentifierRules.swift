/// The rules every session identifier follows, in one place.
///
/// - An identifier is a non-empty string without NUL, compared by its UTF-8 bytes and never normalized
///   (``ExactIdentifier``).
/// - Each layer has its own length limit, passed as a parameter: the stores accept up to
///   ``maximumStoredLength`` bytes (what they can still name, through ``IdentifierEncoding``'s hashed names), while
///   the controller and the registry open sessions only for identifiers up to ``maximumSessionLength`` bytes.
/// - Stores name records with ``IdentifierEncoding``, whose names use only `[a-z0-9_-]`; a name a store reserves for
///   itself (such as the remote store's current-identifier key) follows ``problem(withReservedName:maximumLength:)``.
enum IdentifierRules {
    /// The longest identifier a store accepts, in UTF-8 bytes: 64 KiB.
    static let maximumStoredLength = 64 * 1024
    /// The longest identifier a controller or registry opens a session for, in UTF-8 bytes.
    static let maximumSessionLength = 1024

    /// Why `identifier` is not usable, or `nil`: it is empty, longer than `maximumLength` UTF-8 bytes, or contains
    /// NUL.
    static func problem(with identifier: String, maximumLength: Int) -> String? {
        let utf8 = identifier.utf8
        if utf8.isEmpty { return "is empty" }
        if utf8.count > maximumLength { return "is \(utf8.count) bytes long; the limit is \(maximumLength)" }
        if utf8.contains(0) { return "contains NUL" }
        return nil
    }

    /// Why `identifier` cannot name a session, or `nil` (the limit is ``maximumSessionLength``).
    static func sessionProblem(with identifier: String) -> String? {
        problem(with: identifier, maximumLength: maximumSessionLength)
    }

    /// Checks that a store can keep something under `identifier`.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier`` when it is empty, contains NUL, or is longer than
    ///   `maximumLength` (by default ``maximumStoredLength``) UTF-8 bytes.
    static func validateForStore(_ identifier: String, maximumLength: Int = maximumStoredLength) throws {
        if let problem = problem(with: identifier, maximumLength: maximumLength) {
            throw UserSessionError(.invalidIdentifier, "the session identifier \(problem)")
        }
    }

    /// Why `name` cannot be a key a store reserves for itself, or `nil`: it must be 1 to `maximumLength` bytes of
    /// `[a-z0-9_-]` and must not start with `u-` or `h-`, so that it can never equal an encoded identifier.
    static func problem(withReservedName name: String, maximumLength: Int) -> String? {
        let isSafe = name.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
        }
        guard !name.isEmpty, name.utf8.count <= maximumLength, isSafe, !name.hasPrefix("u-"), !name.hasPrefix("h-")
        else {
            return "must be 1–\(maximumLength) characters of [a-z0-9_-] and not start with u- or h-"
        }
        return nil
    }
}

extension UserSessionController {
    /// The longest accepted session identifier, in UTF-8 bytes (``IdentifierRules/maximumSessionLength``).
    static let maximumIdentifierLength = IdentifierRules.maximumSessionLength

    /// Why `identifier` is not acceptable, or `nil`: ``IdentifierRules/sessionProblem(with:)``, under the name the
    /// registry calls it by.
    static func identifierProblem(_ identifier: String) -> String? {
        IdentifierRules.sessionProblem(with: identifier)
    }

    /// Throws ``UserSessionError/Code/invalidIdentifier`` for an identifier no session can have. Not inlined: a
    /// call's async frame need not hold the check or its error.
    @inline(never)
    static func check(_ identifier: String) throws(UserSessionError) {
        if let problem = identifierProblem(identifier) {
            throw UserSessionError(.invalidIdentifier, "the identifier \(problem)")
        }
    }

    /// Throws ``UserSessionError/Code/invalidPrototype`` for a prototype whose identifier no session can have. Not
    /// inlined, like the identifier's check.
    @inline(never)
    static func check(_ prototype: UserSessionPrototype) throws(UserSessionError) {
        if let problem = identifierProblem(prototype.identifier) {
            throw UserSessionError(.invalidPrototype, "the prototype's identifier \(problem)")
        }
    }
}
