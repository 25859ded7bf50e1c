/// The write turn of an identifier, for the package's store wrappers that rewrite a stored record outside any
/// session (the sealed store's reseal): such a write runs in the turn of the ledger that every controller given the
/// same store instance shares, so it never lands between a refresh's read and write, nor after a sign-out.
package enum IdentifierWriteTurn {
    /// Runs `write` in `identifier`'s write turn of the ledger of `store` (one per store instance).
    package static func run<Value>(
        store: any TokenStore, identifier: String, _ write: () async throws -> Value
    ) async rethrows -> Value {
        try await CredentialsLedger.shared(for: store).withWriteTurn(identifier, write)
    }
}
