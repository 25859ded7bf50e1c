import UserSessions

/// Another store's records seen through a plain ``TokenStore``: whatever the base offers besides (a lease,
/// revisions, change notifications) is hidden, and, being a value, it has no instance identity, so every standalone
/// controller given it keeps its credentials apart, as another process over the same records would.
package struct PlainTokenStore: ForwardingTokenStore {
    package let base: any TokenStore
    package var forwardedTo: any TokenStore { base }

    package init(_ base: any TokenStore) {
        self.base = base
    }
}
