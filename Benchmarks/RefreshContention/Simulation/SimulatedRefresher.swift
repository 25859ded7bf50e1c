import Foundation
import Synchronization
import UserSessions

/// The one simulated token endpoint shared by every strategy: it sleeps for a configurable latency (the
/// simulated network), counts its calls, and remembers which tokens it was asked to refresh.
///
/// - `callCount` is the number of refreshes made.
/// - `distinctRefreshedTokens` is the number of distinct tokens that needed refreshing (the expiries); a
///   strategy that refreshes the same token twice makes `callCount` exceed it.
/// - With a `hold` latch, every call waits until the latch opens before its latency starts; the contention
///   workload uses it so that all callers have made their call before the refresh can finish.
final class SimulatedRefresher: Sendable {
    /// A token the refresher handed out.
    struct Issued: Sendable {
        var token: String
        var expiresAt: Double
    }

    let latency: Duration
    let tokenLifetime: Double
    let clock: BenchClock
    private let hold: ArrivalLatch?
    private let samplesMemory: Bool
    private let calls = Atomic<Int>(0)
    private let refreshed = Mutex<Set<String>>([])
    private let firstCall = Mutex<(latency: Duration, residentBytes: Int?)?>(nil)

    init(
        latency: Duration, tokenLifetime: Double, clock: BenchClock, hold: ArrivalLatch? = nil,
        samplesMemory: Bool = false
    ) {
        self.latency = latency
        self.tokenLifetime = tokenLifetime
        self.clock = clock
        self.hold = hold
        self.samplesMemory = samplesMemory
    }

    var callCount: Int { calls.load(ordering: .acquiring) }

    var distinctRefreshedTokens: Int { refreshed.withLock { $0.count } }

    /// How long the first refresh actually slept (the simulated network latency), if there was one.
    var measuredLatency: Duration? { firstCall.withLock { $0?.latency } }

    /// The resident set size sampled by the first refresh just before it returned, if sampling was asked for.
    var residentBytesDuringFirstRefresh: Int? { firstCall.withLock { $0?.residentBytes } }

    /// Refreshes `token`: returns a new, unique token valid for ``tokenLifetime`` from now.
    func refresh(from token: String) async throws -> Issued {
        let number = calls.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue
        refreshed.withLock { _ = $0.insert(token) }
        if let hold { await hold.wait() }
        let clock = ContinuousClock()
        let start = clock.now
        if latency > .zero {
            try await Task.sleep(for: latency)
        }
        if number == 1 {
            let slept = clock.now - start
            // Sampled while the waiters are still parked: the refresh has not returned yet.
            let resident = samplesMemory ? ResidentMemory.bytes() : nil
            firstCall.withLock { $0 = (slept, resident) }
        }
        return Issued(token: "token-\(number)", expiresAt: self.clock.seconds() + tokenLifetime)
    }
}

/// Lets ``UserSessionController`` use the simulated endpoint.
struct SimulatedTokenRefresher: TokenRefresher {
    let simulated: SimulatedRefresher

    func refresh(_ credentials: Credentials) async throws -> Credentials {
        let issued = try await simulated.refresh(from: credentials.accessToken)
        var refreshed = credentials
        refreshed.accessToken = issued.token
        refreshed.expiresAt = Date(timeIntervalSinceReferenceDate: issued.expiresAt)
        refreshed.lastRefreshedAt = simulated.clock.sessionClock.now()
        refreshed.source = .refresh
        return refreshed
    }
}
