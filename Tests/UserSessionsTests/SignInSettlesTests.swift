import Foundation
import Testing

@testable import UserSessions

/// A session that signed in alone costs the ledger what a restored one costs: once its sign-in landed, the entry
/// forgets what the sign-in made it keep, unless another holder still needs it. Against a server that rotates refresh
/// tokens and revokes the family on reuse (``TokenFamilyServer``), on a manual clock.
struct SignInSettlesTests {
    /// A store a test can hold in the middle of a call, a token server, a manual clock.
    typealias Bench = LedgerOneOwnerSeamTests.Bench

    static func storedRefreshToken(_ user: String, in bench: Bench) async throws -> String? {
        try await bench.store.base.load(identifier: user)?.credentials?.refreshToken
    }

    @Test func aSessionSignedInAloneLeavesTheLedgerNoDetailAndStillRefreshesOnce() async throws {
        let bench = Bench()
        let alice = bench.controller()
        _ = try await alice.open(bench.server.signIn("alice", expiresIn: 10))
        #expect(bench.ledger.entryCount == 1)
        #expect(!bench.ledger.keepsDetail("alice"))

        // Inside the lead time: one refresh, served, its rotation stored; nothing presented twice.
        bench.time.advance(by: 5)
        #expect(try await alice.accessToken() == "alice/at-1")
        #expect(try await Self.storedRefreshToken("alice", in: bench) == "alice/rt-1")
        #expect(bench.server.presented == ["alice/rt-0"])

        // A second controller restores her from the record: it holds the rotation and refreshes it, not the sign-in's.
        let again = bench.controller()
        _ = try await again.restore(identifier: "alice")
        bench.time.advance(by: 3600)
        #expect(try await again.accessToken() == "alice/at-2")
        #expect(bench.server.reuses == 0)
        await again.shutdown()
        await alice.shutdown()
        #expect(bench.ledger.entryCount == 0)
    }

    @Test func aSignInBesideAnotherHolderKeepsWhatThatHolderNeeds() async throws {
        let bench = Bench()
        let first = bench.controller()
        _ = try await first.open(bench.server.signIn("alice", expiresIn: 10))
        let second = bench.controller()
        _ = try await second.open(bench.server.signIn("alice"))
        // Two hold alice: the entry keeps its memory, so the first, which holds the fence from before the second
        // sign-in, still leads its own refresh instead of being refused as a session that let alice go.
        #expect(bench.ledger.keepsDetail("alice"))
        bench.time.advance(by: 5)
        #expect(try await first.accessToken() == "alice/at-1")
        #expect(bench.server.reuses == 0)
        // The newer sign-in stays in the store: the first's rotation is fenced.
        #expect(try await Self.storedRefreshToken("alice", in: bench) == "alice~1/rt-0")
        await first.shutdown()
        await second.shutdown()
    }

    @Test func aSignInWhoseSessionRefreshesMeanwhileKeepsTheDetailAndWritesTheRotation() async throws {
        let bench = Bench()
        let controller = bench.controller()
        // The sign-in's write waits; meanwhile the session, readable already, refreshes its expired token.
        let (save, opening, request) = await bench.signInWhileItsSessionRefreshes(on: controller)
        save.open()
        _ = try await opening.value
        // The refresh is in flight: the sign-in's memory stays, and so it does once the rotation is written.
        #expect(bench.ledger.keepsDetail("alice"))
        bench.server.releaseRefreshes()
        #expect(try await request.value == "alice/at-1")
        #expect(try await Self.storedRefreshToken("alice", in: bench) == "alice/rt-1")
        #expect(bench.ledger.keepsDetail("alice"))
        #expect(bench.server.reuses == 0)
        await controller.shutdown()
        #expect(bench.ledger.entryCount == 0)
    }
}
