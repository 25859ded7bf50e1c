import Foundation
import Synchronization
import UserSessions

/// Workload E: resident memory per idle opened session, for servers holding many users' sessions at once.
///
/// Opens N sessions through a ``UserSessionRegistry`` (one controller each, tokens valid for an hour, user info of
/// an id only) and reports what they keep allocated divided by N: the growth of the allocator's bytes in use (the
/// figure the target reads), and beside it the growth of resident memory. The store discards what it is given, so
/// the figure is the session's own cost: controller, event hub, credentials gate, the ledger's and the registry's
/// entries.
///
/// Resident memory undercounts: new objects reuse memory earlier runs freed, which stays resident in the arenas of
/// the threads that freed it, so it grows by less than they take (by 40% to 80% less in this benchmark's runs).
struct IdleSessionsWorkload {
    let plan: BenchmarkPlan

    struct Outcome {
        var sessions: Int
        /// Heap bytes in use per session through the registry, one value per repetition.
        var bytesPerSession: [Double] = []
        /// The floor: heap bytes in use per entry of a dictionary of ``BareCredentials``, one value per repetition.
        var bytesPerBareEntry: [Double] = []
        /// Resident bytes per session, one value per repetition.
        var residentBytesPerSession: [Double] = []
        var failures: [String] = []
    }

    /// What a server that only keeps tokens holds per user: the floor of workload E.
    struct BareCredentials {
        var accessToken: String
        var refreshToken: String?
        var expiresAt: Date?
    }

    /// A store that keeps nothing, so that only the sessions themselves are measured.
    final class DiscardingStore: TokenStore {
        func load(identifier: String) async throws -> StoredSession? { nil }
        func save(_ session: StoredSession, identifier: String) async throws {}
        func remove(identifier: String) async throws {}
        func loadCurrentIdentifier() async throws -> String? { nil }
        func saveCurrentIdentifier(_ identifier: String?) async throws {}
        func storedIdentifiers() async throws -> [String] { [] }
    }

    /// The progress weight of the whole workload: one unit per run (registry and floor, every repetition).
    static func weight(_ plan: BenchmarkPlan) -> Double { Double(plan.repetitions * 2) }

    func run(progress: ProgressLine) async -> Outcome {
        var outcome = Outcome(sessions: plan.idleSessions)
        for repetition in 1...plan.repetitions {
            do {
                let sessions = plan.idleSessions
                if let bytes = try await withDeadline(
                    plan.runLimit * 2, operation: { try await Self.runOnce(sessions: sessions) })
                {
                    outcome.bytesPerSession.append(bytes.heap)
                    outcome.residentBytesPerSession.append(bytes.resident)
                }
                progress.advance(by: 1, detail: "registry #\(repetition)")
                if let bytes = Self.measureBare(entries: sessions) { outcome.bytesPerBareEntry.append(bytes) }
                progress.advance(by: 1, detail: "bare credentials #\(repetition)")
            } catch {
                outcome.failures.append("idle sessions: \(error)")
                break
            }
        }
        return outcome
    }

    /// The same users' credentials, kept as ``BareCredentials`` in a dictionary keyed by user id.
    static func measureBare(entries: Int) -> Double? {
        let prototypes = makePrototypes(entries)
        let before = ResidentMemory.heapInUse()
        var table: [String: BareCredentials] = [:]
        for prototype in prototypes {
            guard let credentials = prototype.credentials else { continue }
            table[prototype.userInfo.id] = BareCredentials(
                accessToken: credentials.accessToken, refreshToken: credentials.refreshToken,
                expiresAt: credentials.expiresAt)
        }
        // The prototypes too: freed before the reading, their array would count against the entries.
        let after = withExtendedLifetime(prototypes) { ResidentMemory.heapInUse() }
        // Keeps the dictionary alive until after the measurement.
        guard let before, let after, table.count == entries else { return nil }
        return Double(after - before) / Double(entries)
    }

    /// `count` users with an id, an access token, a refresh token and an expiry an hour away.
    static func makePrototypes(_ count: Int) -> [UserSessionPrototype] {
        (0..<count).map { index in
            UserSessionPrototype(
                userInfo: UserInfo(id: "user-\(index)"),
                credentials: Credentials(
                    accessToken: "access-token-of-user-\(index)", refreshToken: "refresh-token-of-user-\(index)",
                    expiresAt: .now.addingTimeInterval(3600)))
        }
    }

    /// Heap and resident bytes per session.
    static func runOnce(sessions: Int) async throws -> (heap: Double, resident: Double)? {
        let registry = UserSessionRegistry(store: DiscardingStore())
        let prototypes = makePrototypes(sessions)
        ResidentMemory.releaseFreeMemory()
        let (heapBefore, before) = (ResidentMemory.heapInUse(), ResidentMemory.bytes())
        for prototype in prototypes { try await registry.open(prototype) }
        let (heapAfter, after) = withExtendedLifetime(prototypes) {
            (ResidentMemory.heapInUse(), ResidentMemory.bytes())
        }
        await registry.shutdown()
        guard let heapBefore, let heapAfter, let before, let after else { return nil }
        let count = Double(sessions)
        return (Double(heapAfter - heapBefore) / count, Double(after - before) / count)
    }
}
