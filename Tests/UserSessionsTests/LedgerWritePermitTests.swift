import Foundation
import Testing

@testable import UserSessions

/// The write a refresh's leader gets reserved with its rotation (``CredentialsLedger/WritePermit``): the ledger's
/// side of a refresh commit is two critical sections, the refresher's return and the write's end, and a reservation
/// is spent exactly once whatever happens in between.
struct LedgerWritePermitTests {
    static let user = UserInfo(id: "alice")
    static let sent = Credentials(accessToken: "at-0", refreshToken: "rt-0", expiresAt: nil)
    static let rotated = Credentials(accessToken: "at-1", refreshToken: "rt-1", expiresAt: nil)

    /// Leads a refresh of alice's `rt-0` under `fence` that returns `rt-1`; `during` runs while the refresher is
    /// "at the server".
    func refresh(
        _ ledger: CredentialsLedger, fence: UInt64, during: () -> Void = {}
    ) async -> CredentialsLedger.WritePermit? {
        let (result, permit) = await ledger.refresh(
            identifier: "alice", userInfo: Self.user, credentials: Self.sent, fence: fence
        ) {
            during()
            return .success(Self.rotated)
        }
        #expect((try? result.get()) == Self.rotated)
        return permit
    }

    @Test func theLeaderGetsTheWriteOfItsRotationReservedAndSpendsItByWriting() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        let permit = try #require(await refresh(ledger, fence: fence))
        #expect(permit.fence == fence)
        // Reserved: the write counts as in progress until it ends.
        #expect(ledger.hasPendingWork("alice"))
        #expect(ledger.begins(permit))
        #expect(ledger.writeFinished("alice", fence: fence, wrote: Self.rotated) == .done)
        #expect(!ledger.hasPendingWork("alice"))
        ledger.release("alice")
        #expect(ledger.entryCount == 0)
    }

    /// What changes the fence after the refresher returned: a sign-out (from anywhere) or a new sign-in.
    enum FenceChange: CaseIterable, Sendable {
        case signedOut, signedIn

        func apply(to ledger: CredentialsLedger) {
            switch self {
            case .signedOut: ledger.signedOut(identifier: "alice")
            case .signedIn: ledger.signedIn("alice")
            }
        }
    }

    @Test(arguments: FenceChange.allCases)
    func aFenceChangeAfterTheRefresherReturnedStopsTheReservedWriteAndReleasesIt(_ change: FenceChange) async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        let permit = try #require(await refresh(ledger, fence: fence))
        change.apply(to: ledger)
        #expect(!ledger.begins(permit))
        #expect(!ledger.hasPendingWork("alice"))
        ledger.release("alice")
        #expect(ledger.entryCount == 0)
    }

    @Test func aForfeitedPermitLosesNoRotation() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        let permit = try #require(await refresh(ledger, fence: fence))
        ledger.forfeit(permit)
        // Still unwritten, so still pending, and a restore reading the spent token gets the rotation.
        #expect(ledger.hasPendingWork("alice"))
        let stored = StoredSession(userInfo: Self.user, credentials: Self.sent)
        let (read, adopted) = try ledger.readThrough(stored, identifier: "alice")
        #expect(adopted)
        #expect(read.credentials == Self.rotated)
        // Another writer may take the write over.
        #expect(ledger.writeBegins("alice", fence: fence))
        #expect(ledger.writeFinished("alice", fence: fence, wrote: Self.rotated) == .done)
        ledger.release("alice")
        #expect(ledger.entryCount == 0)
    }

    @Test func aRefreshWhoseUserSignedOutWhileItWasInFlightGetsNoPermit() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        let permit = await refresh(ledger, fence: fence) { ledger.signedOut(identifier: "alice") }
        #expect(permit == nil)
        // Nothing is written for a signed-out user, but the spent token is never presented again.
        #expect(!ledger.hasPendingWork("alice"))
        let stored = StoredSession(userInfo: Self.user, credentials: Self.sent)
        #expect(try ledger.readThrough(stored, identifier: "alice").session.credentials == Self.rotated)
        ledger.release("alice")
    }
}
