extension ClientCredentialsTokenManager {
    /// What a token of the server's own is for: a set of scopes and a set of resource indicators (RFC 8707).
    ///
    /// Each key has its own token, its own single request per expiry, its own backoff. Both are sets: `["b", "a"]`,
    /// `["a", "b", "a"]` and `["a", "b"]` are one key. Scopes must be RFC 6749 scope tokens and resources absolute
    /// URIs without a fragment; a key that breaks these rules fails with ``UserSessionError/Code/invalidTokenRequest``
    /// when it is first used, before anything is sent.
    public struct Key: Hashable, Sendable, CustomStringConvertible {
        /// The scopes to request (`scope`); empty asks for the client's default scope.
        public var scopes: Set<String> {
            didSet { tokenKey = ClientTokenKey(scopes: scopes, resources: resources) }
        }
        /// The resource indicators to request (`resource`, RFC 8707), such as `https://api.example.com/`.
        public var resources: Set<String> {
            didSet { tokenKey = ClientTokenKey(scopes: scopes, resources: resources) }
        }
        /// The manager's form of this key, made (and hashed) once with the key rather than at every call.
        private(set) var tokenKey: ClientTokenKey

        /// Creates a key.
        public init(scopes: Set<String> = [], resources: Set<String> = []) {
            self.scopes = scopes
            self.resources = resources
            tokenKey = ClientTokenKey(scopes: scopes, resources: resources)
        }

        /// The sorted scopes and resources.
        public var description: String {
            resources.isEmpty
                ? "Key(scopes: \(scopes.sorted()))"
                : "Key(scopes: \(scopes.sorted()), resources: \(resources.sorted()))"
        }
    }
}
