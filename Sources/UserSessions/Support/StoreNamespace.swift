/// The rule for the namespace of the package's PostgreSQL stores (the token store, the OpenID Connect state store,
/// the web sessions' browser records): it lives in this module so that every store checks the same rule.
package enum StoreNamespace {
    /// Whether `namespace` is 1 to `maximumLength` bytes among `a`–`z`, `0`–`9`, `_` and `-`.
    package static func isValid(_ namespace: String, maximumLength: Int = 40) -> Bool {
        (1...maximumLength).contains(namespace.utf8.count)
            && namespace.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                    || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
            }
    }
}
