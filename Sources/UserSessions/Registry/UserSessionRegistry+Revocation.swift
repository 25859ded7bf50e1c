extension UserSessionRegistry {
    /// ``closeAndClear(identifier:)``'s revocation for a user without a controller: revokes the credentials stored
    /// under `identifier`, if they can be loaded, within the configuration's
    /// ``UserSessionController/Configuration/revocationTimeout``.
    ///
    /// A failure is delivered to the subscribers of ``events(bufferSize:)`` and to the observers as a
    /// `.revocationFailed` event of that identifier. No controller emitted it, so its session is a closed session
    /// of that identifier and its ``UserSessionEvent/sequence`` is 0; observers get generation 0.
    func revokeStoredCredentials(of identifier: String) async {
        guard
            let failure = await SignOutRevocation.run(
                refresher: refresher, credentials: nil, identifier: identifier, store: store,
                configuration: configuration)
        else { return }
        let event = UserSessionEvent(
            kind: .revocationFailed(failure.failureClass),
            session: UserSession(identifier: identifier, state: .closed), sequence: 0, detail: failure.detail)
        relay.publish(Event(identifier: identifier, event: event))
        let context = UserSessionEventContext(generation: 0, previousState: .closed)
        configuration.observers.notify { $0.observe(event, context: context) }
    }
}
