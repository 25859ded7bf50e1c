import Foundation

/// What one token of a ``ClientCredentialsTokenManager`` is for, as the manager keys it: the scope set and resource
/// set of the request and, for a token exchange, the user (by identifier) and the audience.
///
/// Scopes and resources are sets, so their order and duplicates never split the cache. They are ASCII once checked
/// (``validate()``), so comparing them as strings is comparing bytes; the user and the audience compare by their UTF-8
/// bytes (``ExactIdentifier``).
///
/// The hash of the four parts is computed once, when the key is made: every caller that finds a token expiring looks
/// its key up twice, and hashing a set hashes each of its elements. Keys with different hashes are unequal without
/// comparing their sets.
struct ClientTokenKey: Hashable, Sendable {
    let scopes: Set<String>
    let resources: Set<String>
    let subject: ExactIdentifier?
    let audience: ExactIdentifier?
    private let digest: Int

    init(scopes: Set<String>, resources: Set<String>, subject: String? = nil, audience: String? = nil) {
        self.scopes = scopes
        self.resources = resources
        self.subject = subject.map(ExactIdentifier.init)
        self.audience = audience.map(ExactIdentifier.init)
        var hasher = Hasher()
        hasher.combine(scopes)
        hasher.combine(resources)
        hasher.combine(self.subject)
        hasher.combine(self.audience)
        digest = hasher.finalize()
    }

    static func == (lhs: ClientTokenKey, rhs: ClientTokenKey) -> Bool {
        lhs.digest == rhs.digest && lhs.scopes == rhs.scopes && lhs.resources == rhs.resources
            && lhs.subject == rhs.subject && lhs.audience == rhs.audience
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(digest)
    }

    /// Checks that the key can be sent: every scope is an RFC 6749 §3.3 scope token (printable ASCII but space, `"`
    /// and `\`), every resource an absolute URI without a fragment (RFC 8707 §2), the audience not empty.
    ///
    /// - Throws: ``UserSessionError/Code/invalidTokenRequest``, naming what is wrong (a scope only by its position:
    ///   it may be anything).
    func validate() throws(UserSessionError) {
        for scope in scopes where !Self.isScopeToken(scope) {
            throw UserSessionError(
                .invalidTokenRequest,
                "a scope is not an RFC 6749 scope token (1 or more printable ASCII characters but space, \" and \\)")
        }
        for resource in resources where !Self.isResourceIndicator(resource) {
            throw UserSessionError(
                .invalidTokenRequest,
                "a resource is not an absolute ASCII URI without a fragment (RFC 8707), or is longer than 2048 bytes")
        }
        if let audience, audience.value.isEmpty || audience.value.utf8.contains(0) {
            throw UserSessionError(.invalidTokenRequest, "the audience is empty or contains NUL")
        }
    }

    static func isScopeToken(_ scope: String) -> Bool {
        !scope.utf8.isEmpty && scope.utf8.count <= 1024
            && scope.utf8.allSatisfy { $0 == 0x21 || (0x23...0x5B).contains($0) || (0x5D...0x7E).contains($0) }
    }

    static func isResourceIndicator(_ resource: String) -> Bool {
        guard resource.utf8.count <= 2048, resource.utf8.allSatisfy({ (0x21...0x7E).contains($0) }),
            !resource.contains("#"), let url = URL(string: resource), let scheme = url.scheme, !scheme.isEmpty
        else { return false }
        return true
    }

    /// The key written out unambiguously: every part prefixed with its length in UTF-8 bytes, scopes and resources
    /// sorted, after a version and the client (token endpoint and client id). A hostile scope cannot make two keys
    /// read alike, since no part can run into the next.
    func canonical(clientID: String, tokenEndpoint: URL) -> String {
        var text = "client-token-v1"
        func part(_ tag: String, _ value: String) { text += "|\(tag)\(value.utf8.count):\(value)" }
        part("e", tokenEndpoint.absoluteString)
        part("c", clientID)
        for scope in scopes.sorted() { part("s", scope) }
        for resource in resources.sorted() { part("r", resource) }
        if let subject { part("u", subject.value) }
        if let audience { part("a", audience.value) }
        return text
    }
}
