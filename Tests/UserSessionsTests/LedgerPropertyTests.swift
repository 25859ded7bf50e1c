import Foundation
import Testing

@testable import UserSessions

/// The properties behind the seams of issue 17, over generated schedules: for any interleaving of opens, closes,
/// sign-outs, evictions, restores, user switches and registry operations over three users (two of them spelled
/// alike: `"caf\u{E9}"` and `"cafe\u{301}"`), with refreshes held in flight and a store that fails on demand,
/// - no refresh token is ever presented twice to the rotating server, and
/// - no record of a user who signed out comes back.
///
/// CI runs a fixed seed; `USER_SESSIONS_LEDGER_SEED` and `USER_SESSIONS_LEDGER_ITERATIONS` run other or longer
/// explorations (a failure names the schedule's seed, which reproduces it alone with iterations 1).
struct LedgerPropertyTests {
    static let users = ["alice", "caf\u{E9}", "cafe\u{301}"]

    static var seed: UInt64 {
        ProcessInfo.processInfo.environment["USER_SESSIONS_LEDGER_SEED"].flatMap { UInt64($0) } ?? 17
    }

    static var iterations: Int {
        ProcessInfo.processInfo.environment["USER_SESSIONS_LEDGER_ITERATIONS"].flatMap { Int($0) } ?? 24
    }

    @Test func noRefreshTokenIsPresentedTwiceAndNoSignedOutRecordComesBack() async throws {
        var seeds = SplitMix64(seed: Self.seed)
        for _ in 0..<Self.iterations {
            let seed = Self.iterations == 1 ? Self.seed : seeds.next()
            try await withHangGuard("schedule \(seed)", seconds: 60) { try await Self.run(seed: seed) }
        }
    }

    /// The exact bytes of an identifier: the key the property's bookkeeping uses, as every store does.
    private static func key(_ identifier: String) -> [UInt8] { Array(identifier.utf8) }

    private static func run(seed: UInt64, steps: Int = 48) async throws {
        var random = SplitMix64(seed: seed)
        let bench = LedgerSeamTests.Bench()
        let server = bench.server
        let registry = try bench.registry(idleTimeout: .seconds(300))
        let controllers = [bench.controller(), bench.controller()]
        // For each user whose last lifecycle outcome is known: signed out (`true`) or signed in (`false`).
        var signedOut: [[UInt8]: Bool] = [:]
        var requests: [Task<Void, Never>] = []
        var holding = false

        func pick(_ count: Int) -> Int { Int(random.next() % UInt64(count)) }

        /// Runs a lifecycle operation and waits for it. One that waits for a held refresh (a restore of expired
        /// credentials, or any call queued behind one) gets as far as it can first; then the refreshes answer.
        func settle<T: Sendable>(_ operation: @escaping @Sendable () async -> T) async -> T {
            let task = Task { await operation() }
            if holding {
                for _ in 0..<16 { await Task.yield() }
                server.releaseRefreshes()
                holding = false
            }
            return await task.value
        }

        let trace = ProcessInfo.processInfo.environment["LEDGER_TRACE"] != nil
        for step in 0..<steps {
            let userIndex = pick(users.count)
            let user = users[userIndex]
            let which = pick(controllers.count)
            let controller = controllers[which]
            let op = pick(17)
            if trace { print("step \(step) op \(op) user \(userIndex) c\(which) holding \(holding)") }
            let expiresIn = Double(5 + pick(120))
            switch op {
            case 0:
                let prototype = server.signIn(user, expiresIn: expiresIn)
                if await settle({ (try? await registry.open(prototype)) != nil }) { signedOut[key(user)] = false }
            case 1:
                requests.append(Task { _ = try? await registry.session(for: user).accessToken() })
            case 2:
                await settle { await registry.close(identifier: user) }
            case 3:
                let cleared = await settle { (try? await registry.closeAndClear(identifier: user)) != nil }
                signedOut[key(user)] = cleared ? true : nil
            case 4:
                _ = await settle { await registry.evictIdle() }
            case 5:
                let prototype = server.signIn(user, expiresIn: expiresIn)
                if await settle({ (try? await registry.switchUser(to: prototype)) != nil }) {
                    signedOut[key(user)] = false
                }
            case 6:
                let prototype = server.signIn(user, expiresIn: expiresIn)
                if await settle({ (try? await controller.open(prototype)) != nil }) { signedOut[key(user)] = false }
            case 7:
                _ = await settle { try? await controller.restore(identifier: user) }
            case 8:
                await settle { await controller.close() }
            case 9:
                // Only a controller that knows its user: otherwise it would clear the persisted current one.
                guard let known = controller.session.identifier else { break }
                let cleared = await settle { (try? await controller.closeAndClear()) != nil }
                signedOut[key(known)] = cleared ? true : nil
            case 10:
                requests.append(Task { _ = try? await controller.accessToken() })
            case 11:
                requests.append(
                    Task {
                        _ = try? await controller.withAccessToken(isAuthenticationFailure: { _ in false }) { $0 }
                    })
            case 12:
                requests.append(Task { _ = try? await registry.session(for: user).refreshCredentials() })
            case 13, 14:
                bench.time.advance(by: Double(pick(240)))
            case 15:
                bench.store.failWrites(pick(2) == 0)
            default:
                if holding { server.releaseRefreshes() } else { server.holdRefreshes() }
                holding.toggle()
            }
        }

        // Quiesce: answer every refresh, bring the store back, let every request and pending write finish.
        server.releaseRefreshes()
        bench.store.failWrites(false)
        if trace { print("quiesce") }
        for (index, request) in requests.enumerated() {
            if trace { print("request \(index)") }
            await request.value
        }
        if trace { print("shutdown") }
        await registry.shutdown()
        for controller in controllers { await controller.shutdown() }
        let ledger = bench.ledger
        // Until the ledger let go of every entry (a write loop wakes on the session clock to notice it is done).
        // Refreshes started in the background (the soft window) may still be answering: bounded by the hang guard.
        while ledger.entryCount > 0 {
            bench.time.advance(by: 61)
            for _ in 0..<10 { await Task.yield() }
        }

        let presented = server.presented
        if trace { print("presented \(presented)") }
        #expect(server.reuses == 0, "schedule \(seed): a spent refresh token was presented again")
        #expect(
            Set(presented).count == presented.count, "schedule \(seed): a refresh token was presented twice")
        for (index, user) in users.enumerated() where signedOut[key(user)] == true {
            let record = try await bench.store.base.load(identifier: user)
            #expect(record == nil, "schedule \(seed): the record of user \(index) came back")
        }
        #expect(ledger.entryCount == 0, "schedule \(seed): the ledger kept entries of users who came and went")
    }
}
