/// What a controller is made from, resolved once: the configuration, whether it is valid, the refresh policy derived
/// from it, the store's ledger and the refresher.
///
/// One value serves every controller made from the same parts: a ``UserSessionRegistry`` makes one and hands it to
/// each controller it creates, so an idle session keeps a reference instead of its own copy of the configuration,
/// and a first request after a restart neither validates the configuration nor derives the policy again.
final class ControllerSettings: Sendable {
    let configuration: UserSessionController.Configuration
    /// Why ``configuration`` is unusable, if it is: every lifecycle call of the controller throws it.
    let configurationError: UserSessionError?
    /// The refresh core's policy, derived from ``configuration``.
    let policy: CredentialsGate.Policy
    /// The owner of each identifier's credentials for the store (see ``CredentialsLedger``).
    let ledger: CredentialsLedger
    let refresher: (any TokenRefresher)?
    /// The event buffer size and observers of `configuration`, shared by the hubs of every controller made from these
    /// settings.
    let eventOptions: EventHub.Options

    init(
        store: any TokenStore, refresher: (any TokenRefresher)?, configuration: UserSessionController.Configuration,
        ledger: CredentialsLedger? = nil, policy: CredentialsGate.Policy? = nil
    ) {
        self.configuration = configuration
        do throws(UserSessionError) {
            try configuration.validate()
            configurationError = nil
        } catch {
            configurationError = error
        }
        self.policy = policy ?? configuration.refreshPolicy
        self.ledger = ledger ?? CredentialsLedger.shared(for: store)
        self.refresher = refresher
        eventOptions = EventHub.Options(
            defaultBufferSize: configuration.eventBufferSize, observers: configuration.observers)
    }

    /// The store every controller made from these settings reads and writes.
    var store: any TokenStore { ledger.store }
}
