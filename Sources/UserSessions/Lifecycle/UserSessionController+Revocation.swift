extension UserSessionController {
    /// ``closeAndClear()``'s revocation, after the session ended and before its credentials are removed, within
    /// ``Configuration/revocationTimeout``.
    ///
    /// When a session was open (`sessionWasOpen`), its last credentials in memory are revoked: they are the newest
    /// this controller saw (a refresh that committed while it closed included), newer than the stored ones if a
    /// write failed. Otherwise the credentials stored under `identifier` are, if they can be loaded. A failure is
    /// reported with `.revocationFailed`, never thrown: the removal goes ahead either way.
    func revokeBeforeClearing(_ identifier: String, sessionWasOpen: Bool) async {
        guard SignOutRevocation.isEnabled(configuration, gate.refresher) else { return }
        // Ending the session stops serving the credentials but keeps them in the gate until the next open.
        let credentials = sessionWasOpen ? gate.inspect { $0.credentials } : nil
        guard
            let failure = await SignOutRevocation.run(
                refresher: gate.refresher, credentials: credentials, identifier: identifier, store: store,
                configuration: configuration)
        else { return }
        hub.emit(.revocationFailed(failure.failureClass), session: nil, detail: failure.detail)
    }
}
