import Synchronization
import UserSessions

/// Workload E: resident memory per idle opened session, for servers holding many users' sessions at once.
///
/// Opens N sessions through a ``UserSessionRegistry`` (one controller each, tokens valid for an hour, user info of
/// an id only) and reports the growth of resident memory divided by N. The store discards what it is given, so the
/// figure is the session's own cost: controller, event hub, credentials gate, the registry's entry.
struct IdleSessionsWorkload {
    let plan: BenchmarkPlan

    struct Outcome {
        var sessions: Int
        var bytesPerSession: [Double] = []
        var failures: [String] = []
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

    func run() async -> Outcome {
        var outcome = Outcome(sessions: plan.idleSessions)
        for repetition in 1...plan.repetitions {
            do {
                let bytes = try await withDeadline(plan.runLimit * 2) {
                    try await Self.runOnce(sessions: plan.idleSessions)
                }
                if let bytes {
                    outcome.bytesPerSession.append(bytes)
                    Progress.note(
                        "sessions   \(plan.idleSessions) idle sessions #\(repetition): "
                            + "\(Format.number(bytes, places: 0)) B each")
                }
            } catch {
                outcome.failures.append("idle sessions: \(error)")
                break
            }
        }
        return outcome
    }

    static func runOnce(sessions: Int) async throws -> Double? {
        let registry = UserSessionRegistry(store: DiscardingStore())
        let prototypes = (0..<sessions).map { index in
            UserSessionPrototype(
                userInfo: UserInfo(id: "user-\(index)"),
                credentials: Credentials(
                    accessToken: "access-token-of-user-\(index)", refreshToken: "refresh-token-of-user-\(index)",
                    expiresAt: .now.addingTimeInterval(3600)))
        }
        ResidentMemory.releaseFreeMemory()
        let before = ResidentMemory.bytes()
        for prototype in prototypes { try await registry.open(prototype) }
        let after = ResidentMemory.bytes()
        await registry.shutdown()
        guard let before, let after else { return nil }
        return Double(after - before) / Double(sessions)
    }
}
