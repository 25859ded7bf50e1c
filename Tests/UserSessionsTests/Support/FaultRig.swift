import Foundation
import Testing

@testable import UserSessions

/// A controller wired to a ``FaultPlanStore``, a ``RotatingRefresher``, one recording service, a manual clock and an
/// event probe: the bench for the fault-injection tests.
struct FaultRig: Sendable {
    let time: ManualTime
    let store: FaultPlanStore
    let refresher: RotatingRefresher
    let log = ServiceLog()
    let controller: UserSessionController
    let probe: EventProbe

    /// How long a close waits for a hanging store write, per phase (see `CredentialsGate.deactivate()`).
    static let storeTimeout: Duration = .milliseconds(500)

    init(store: FaultPlanStore = FaultPlanStore(), time: ManualTime = ManualTime(), refresher: RotatingRefresher? = nil)
    {
        self.time = time
        self.store = store
        self.refresher = refresher ?? RotatingRefresher(validRefreshToken: "rt-0", now: { time.now })
        controller = UserSessionController(
            store: store, refresher: self.refresher, services: makeServices(1, log: log),
            // A short store deadline: a store that hangs must not hold a close for long (the hang guard is 10 s).
            configuration: .init(storeTimeout: FaultRig.storeTimeout, clock: time.clock))
        probe = EventProbe(controller)
    }

    /// A new controller on the same store, refresher ("server") and clock, as after a restart.
    func restarted() -> FaultRig {
        FaultRig(store: store, time: time, refresher: refresher)
    }

    /// User "user" with `at-0` / `rt-0`, a one-hour token expiring `expiresIn` seconds from now (so 10 s is inside
    /// the 60-s lead time).
    func prototype(expiresIn: TimeInterval = 3600) -> UserSessionPrototype {
        UserSessionPrototype(
            userInfo: UserInfo(id: "user"),
            credentials: Credentials(
                accessToken: "at-0", refreshToken: "rt-0", expiresAt: time.now.addingTimeInterval(expiresIn),
                lastRefreshedAt: time.now.addingTimeInterval(expiresIn - 3600), source: .signIn))
    }

    /// Arms `fault` at the next call to `site`.
    func injectAtNextCall(_ site: StoreCallSite, _ fault: StoreFault, persistent: Bool = false) {
        store.inject(FaultPlan(site: site, fault: fault, nth: store.calls(site) + 1, persistent: persistent))
    }

    /// The refresh token stored for "user", bypassing faults.
    var storedRefreshToken: String? {
        get async { await store.stored("user")?.credentials?.refreshToken }
    }

    /// Waits (bounded) until the probe saw `kind`.
    func waitForEvent(_ kind: UserSessionEvent.Kind, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let probe = self.probe
        try await withHangGuard("event \(kind)", sourceLocation: sourceLocation) { await probe.wait(for: kind) }
    }

    /// How many events of `kind` the probe saw.
    func count(_ kind: UserSessionEvent.Kind) -> Int { probe.kinds.count { $0 == kind } }
}

extension Result {
    /// The ``UserSessionError`` code of a failure, `nil` for a success or another error.
    var errorCode: UserSessionError.Code? {
        guard case .failure(let error) = self else { return nil }
        return (error as? UserSessionError)?.code
    }

    var isSuccess: Bool {
        if case .success = self { return true }
        return false
    }
}

/// Awaits `task` under a hang guard and returns its result.
func boundedResult<T: Sendable>(
    _ what: String, _ task: Task<T, any Error>, sourceLocation: SourceLocation = #_sourceLocation
) async throws -> Result<T, any Error> {
    try await withHangGuard(what, sourceLocation: sourceLocation) { await task.result }
}
