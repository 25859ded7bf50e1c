import Foundation
import Testing

@testable import UserSessions

/// `ClientTokenMachine` driven synchronously: the windows scaled to each lifetime, backoff, rejection, replays and
/// the loop breaker. Waiters are plain numbers here.
struct ClientTokenMachineTests {
    typealias Machine = ClientTokenMachine<Int>

    static let policy = UserSessionController.Configuration().refreshPolicy.refresh

    static func credentials(_ token: String, issuedAt now: Double, lifetime: Double) -> Credentials {
        Credentials(
            accessToken: token, expiresAt: Date(timeIntervalSinceReferenceDate: now + lifetime),
            lastRefreshedAt: Date(timeIntervalSinceReferenceDate: now))
    }

    /// Records an issue (returns nothing, so that a `guard` can `return` it).
    static func fail(_ comment: Comment) { Issue.record(comment) }

    static func waiter(_ id: UInt64) -> FlightWaiters<Int>.Waiter { .init(id: id, continuation: Int(id)) }

    /// Callers ask every 1/50 of the lifetime for 20 lifetimes; every request is answered at once with a token of
    /// the same lifetime. A 2-s, a 60-s and a 300-s token are each requested once per lifetime, when about three
    /// quarters of it have passed, and never in a loop.
    @Test(arguments: [2.0, 60.0, 300.0, 3600.0])
    func tokensOfEveryLifetimeAreRequestedOncePerLifetime(lifetime: Double) {
        var machine = Machine(policy: Self.policy)
        var requests: [Double] = []
        var now = 1_000.0
        var id: UInt64 = 0
        let step = lifetime / 50
        for _ in 0..<(20 * 50) {
            id += 1
            if machine.freshToken(now: now) == nil {
                switch machine.tokenAsked(now: now, rejected: nil, waiter: Self.waiter(id)) {
                case .started(let job), .servedRefreshing(_, let job):
                    requests.append(now)
                    _ = machine.flightSucceeded(
                        id: job.id, credentials: Self.credentials("t\(id)", issuedAt: now, lifetime: lifetime),
                        requested: true, now: now)
                case .served, .joined:
                    break
                case .failed(let error):
                    Issue.record("unexpected failure \(error)")
                }
            }
            now += step
        }
        let gaps = zip(requests.dropFirst(), requests).map { $0 - $1 }
        #expect(!gaps.isEmpty)
        for gap in gaps {
            #expect(gap >= 0.7 * lifetime && gap <= lifetime, "a request after \(gap) s of a \(lifetime)-s token")
        }
    }

    @Test func callersThatNeedATokenJoinTheOneRequestAndAllGetItsAnswer() throws {
        var machine = Machine(policy: Self.policy)
        guard case .started(let job) = machine.tokenAsked(now: 0, rejected: nil, waiter: Self.waiter(1)) else {
            Issue.record("the first caller starts the request")
            return
        }
        for id in 2...100 {
            guard case .joined = machine.tokenAsked(now: 0, rejected: nil, waiter: Self.waiter(UInt64(id))) else {
                Issue.record("caller \(id) joins")
                return
            }
        }
        #expect(machine.waiterCancelled(id: 50) == 50)
        #expect(machine.waiterCancelled(id: 50) == nil)
        let landing = machine.flightSucceeded(
            id: job.id, credentials: Self.credentials("a", issuedAt: 0, lifetime: 3600), requested: true, now: 0)
        #expect(landing.waiters == Array(1...100).filter { $0 != 50 })
        #expect(try landing.result.get() == "a")
        #expect(machine.freshToken(now: 1) == "a")
    }

    @Test func aFailureBacksOffButAValidTokenIsStillServed() throws {
        var machine = Machine(policy: Self.policy)
        guard case .started(let first) = machine.tokenAsked(now: 0, rejected: nil, waiter: Self.waiter(1)) else {
            return Self.fail("starts")
        }
        _ = machine.flightSucceeded(
            id: first.id, credentials: Self.credentials("a", issuedAt: 0, lifetime: 100), requested: true, now: 0)
        // Inside the lead time (10 s of a 100-s token): callers wait for a request, which fails.
        guard case .started(let second) = machine.tokenAsked(now: 95, rejected: nil, waiter: Self.waiter(2)) else {
            return Self.fail("starts in the lead time")
        }
        let failure = UserSessionError(.tokenRequestFailed, "HTTP 503", failureClass: .transient)
        let landing = machine.flightFailed(id: second.id, error: failure, now: 95, jitter: 1)
        #expect(landing.waiters == [2])
        // Backing off (1 s): the still-valid token is served, without a request.
        guard case .served("a") = machine.tokenAsked(now: 95.5, rejected: nil, waiter: Self.waiter(3)) else {
            return Self.fail("serves the valid token while backing off")
        }
        // Without a valid token, backing off means the last failure at once; after the delay, one more request.
        var machine2 = Machine(policy: Self.policy)
        guard case .started(let job) = machine2.tokenAsked(now: 0, rejected: nil, waiter: Self.waiter(1)) else {
            return Self.fail("starts")
        }
        _ = machine2.flightFailed(id: job.id, error: failure, now: 0, jitter: 1)
        guard case .failed(let error) = machine2.tokenAsked(now: 0.5, rejected: nil, waiter: Self.waiter(2)) else {
            return Self.fail("fails at once while backing off")
        }
        #expect(error.code == .tokenRequestFailed)
        guard case .started = machine2.tokenAsked(now: 1.01, rejected: nil, waiter: Self.waiter(3)) else {
            return Self.fail("asks again once the delay elapsed")
        }
    }

    @Test func aRejectedClientRefusesEveryRequestUntilReconfigured() {
        var machine = Machine(policy: Self.policy)
        guard case .started(let job) = machine.tokenAsked(now: 0, rejected: nil, waiter: Self.waiter(1)) else {
            return Self.fail("starts")
        }
        let rejected = UserSessionError(.clientRejected, "HTTP 401", failureClass: .terminal)
        _ = machine.flightFailed(id: job.id, error: rejected, now: 0, jitter: 0)
        guard case .failed(let error) = machine.tokenAsked(now: 1e6, rejected: nil, waiter: Self.waiter(2)) else {
            return Self.fail("refuses")
        }
        #expect(error.code == .clientRejected)
        machine.reconfigured()
        guard case .started = machine.tokenAsked(now: 1e6, rejected: nil, waiter: Self.waiter(3)) else {
            return Self.fail("asks again after reconfiguring")
        }
    }

    @Test func replaysRequestOnlyForTheCurrentTokenAndStopInALoop() {
        var machine = Machine(policy: Self.policy)
        var now = 0.0
        func obtain(_ token: String, rejected: String?) -> Bool {
            guard case .started(let job) = machine.tokenAsked(now: now, rejected: rejected, waiter: Self.waiter(1))
            else { return false }
            _ = machine.flightSucceeded(
                id: job.id, credentials: Self.credentials(token, issuedAt: now, lifetime: 3600), requested: true,
                now: now)
            return true
        }
        #expect(obtain("a", rejected: nil))
        // A replay with a token that was already replaced gets the replacement without a request.
        guard case .served("a") = machine.tokenAsked(now: now, rejected: "old", waiter: Self.waiter(2)) else {
            return Self.fail("serves the replacement")
        }
        now += 1
        #expect(obtain("b", rejected: "a"))
        now += 1
        #expect(obtain("c", rejected: "b"))
        now += 1
        // A fourth request within 30 s, forced by a refused token, is a loop.
        guard case .failed(let error) = machine.tokenAsked(now: now, rejected: "c", waiter: Self.waiter(3)) else {
            return Self.fail("the breaker trips")
        }
        #expect(error.code == .refreshLoop)
    }

    @Test func aForgottenKeyKeepsNothingAndASignOutFailsTheWaiters() {
        var machine = Machine(policy: Self.policy)
        guard case .started(let job) = machine.tokenAsked(now: 0, rejected: nil, waiter: Self.waiter(1)) else {
            return Self.fail("starts")
        }
        let signedOut = UserSessionError(.sessionNotOpen, "signed out")
        machine.forgotten(now: 0, failingWith: signedOut)
        let landing = machine.flightSucceeded(
            id: job.id, credentials: Self.credentials("a", issuedAt: 0, lifetime: 3600), requested: true, now: 0)
        #expect(landing.waiters == [1])
        #expect(throws: UserSessionError.self) { try landing.result.get() }
        #expect(machine.freshToken(now: 0) == nil)
        #expect(machine.isIdle)
    }
}
