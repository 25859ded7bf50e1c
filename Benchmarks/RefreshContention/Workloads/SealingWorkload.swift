import Foundation
import UserSessions

#if Sealing
import Crypto
import UserSessionsSealing
#endif

/// Workload H: what sealing costs. Each store kind is written and read through a plain store and through a
/// ``SealedTokenStore`` over the same kind of store, taking turns within every repetition; the difference is the
/// cost of sealing per write (AES-256-GCM plus the JSON of the credentials) and of opening per load. Beside them,
/// the floor: AES-256-GCM alone sealing and opening the same plaintext bytes (the credentials' JSON, encoded
/// beforehand) with the same associated data.
///
/// The kinds are `memory` (``InMemoryTokenStore``: the cryptography alone), `file` (a ``FileTokenStore`` on a real
/// directory, fsync per write) and `postgres` (with the PostgreSQL trait and `USER_SESSIONS_POSTGRES_URL`).
struct SealingWorkload {
    let plan: BenchmarkPlan

    /// One kind's figures for one repetition: nanoseconds per operation.
    struct Sample {
        var kind: String
        var plainSave: Double
        var sealedSave: Double
        var plainLoad: Double
        var sealedLoad: Double
        /// AES-256-GCM alone on the same bytes: seal with a fresh nonce, and open.
        var aesSeal: Double
        var aesOpen: Double
    }

    struct Outcome {
        var samples: [Sample] = []
        var skipped: [String] = []
        var failures: [String] = []
    }

    /// The store kinds this build can measure, with how many writes and reads each makes per repetition, or the
    /// reason a kind is left out.
    static func kinds(_ plan: BenchmarkPlan) -> [(kind: String, operations: Int, skipped: String?)] {
        #if Sealing
        let sealing: String? = nil
        #else
        let sealing: String? = "built without the Sealing trait (swift run -c release --traits Sealing …)"
        #endif
        return [
            ("memory", plan.sealingOperations, sealing),
            ("file", max(plan.sealingOperations / 50, 20), sealing),
            ("postgres", max(plan.sealingOperations / 20, 20), sealing ?? FleetStore.postgresUnavailable),
        ]
    }

    static func weight(_ plan: BenchmarkPlan) -> Double {
        Double(kinds(plan).filter { $0.skipped == nil }.count * plan.repetitions)
    }

    func run(progress: ProgressLine) async -> Outcome {
        var outcome = Outcome()
        for entry in Self.kinds(plan) {
            if let skipped = entry.skipped {
                outcome.skipped.append("sealing: \(entry.kind) rows skipped: \(skipped)")
                continue
            }
            #if Sealing
            let (kind, operations) = (entry.kind, entry.operations)
            do {
                try await Self.withStores(kind) { plain, sealed in
                    for repetition in 1...plan.repetitions {
                        let plainSave = try await Self.saves(plain, operations)
                        let sealedSave = try await Self.saves(sealed, operations)
                        let plainLoad = try await Self.loads(plain, operations)
                        let sealedLoad = try await Self.loads(sealed, operations)
                        let aes = try Self.aesAlone(operations)
                        outcome.samples.append(
                            Sample(
                                kind: kind, plainSave: plainSave, sealedSave: sealedSave, plainLoad: plainLoad,
                                sealedLoad: sealedLoad, aesSeal: aes.seal, aesOpen: aes.open))
                        progress.advance(by: 1, detail: "\(kind) #\(repetition)")
                    }
                }
            } catch {
                outcome.failures.append("sealing: \(kind): \(error)")
            }
            #endif
        }
        return outcome
    }

    /// How many identifiers the writes and reads cycle through.
    static let identifiers = 64

    static func session(_ index: Int) -> StoredSession {
        StoredSession(
            userInfo: UserInfo(id: "user-\(index)", email: "user-\(index)@example.com"),
            credentials: Credentials(
                accessToken: String(repeating: "a", count: 900) + "\(index)",
                refreshToken: String(repeating: "r", count: 64) + "\(index)",
                expiresAt: Date().addingTimeInterval(3600), lastRefreshedAt: Date(), source: .refresh,
                grantedPermissions: ["openid", "profile", "email"]))
    }

    /// Wall nanoseconds per save, over `operations` sequential saves.
    static func saves(_ store: some TokenStore, _ operations: Int) async throws -> Double {
        let sessions = (0..<identifiers).map(session)
        let clock = ContinuousClock()
        let start = clock.now
        for operation in 0..<operations {
            let index = operation % identifiers
            try await store.save(sessions[index], identifier: "user-\(index)")
        }
        return (clock.now - start).inNanoseconds / Double(operations)
    }

    /// Wall nanoseconds per load, over `operations` sequential loads of saved records.
    static func loads(_ store: some TokenStore, _ operations: Int) async throws -> Double {
        let clock = ContinuousClock()
        let start = clock.now
        var found = 0
        for operation in 0..<operations where try await store.load(identifier: "user-\(operation % identifiers)") != nil
        {
            found += 1
        }
        guard found == operations else { throw BenchmarkError("\(operations - found) loads found nothing") }
        return (clock.now - start).inNanoseconds / Double(operations)
    }

    #if Sealing
    /// A plain store of `kind` and a sealed store over a second store of that kind (kept apart: another directory,
    /// another namespace), for the length of `body`.
    static func withStores(
        _ kind: String, _ body: (any TokenStore, any TokenStore) async throws -> Void
    ) async throws {
        let ring = try SealingKeyRing(current: SealingKey(id: "bench", bytes: (0..<32).map { UInt8($0) }))
        switch kind {
        case "memory":
            try await body(InMemoryTokenStore(), sealed(InMemoryTokenStore(), ring))
        case "file":
            let root = FileManager.default.temporaryDirectory.appending(path: "sealing-bench-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: root) }
            try await body(
                FileTokenStore(directory: root.appending(path: "plain")),
                sealed(FileTokenStore(directory: root.appending(path: "sealed")), ring))
        default:
            let suffix = UUID().uuidString.lowercased().prefix(8)
            try await FleetStore.with("postgres:bench-plain-\(suffix)") { plain in
                try await FleetStore.with("postgres:bench-sealed-\(suffix)") { other in
                    try await body(plain, sealed(other, ring))
                    for index in 0..<identifiers {
                        try await plain.remove(identifier: "user-\(index)")
                        try await other.remove(identifier: "user-\(index)")
                    }
                }
            }
        }
    }

    /// Wall nanoseconds per AES-256-GCM seal (fresh nonce) and per open of the plaintext the sealed store seals for
    /// the same sessions, with the store's associated data, everything prepared before the clock starts.
    static func aesAlone(_ operations: Int) throws -> (seal: Double, open: Double) {
        let key = SymmetricKey(data: (0..<32).map { UInt8($0) })
        let inputs = try (0..<identifiers).map { index in
            guard let credentials = session(index).credentials else {
                throw BenchmarkError("a session without credentials")
            }
            let plaintext = try CredentialsJSON.encode(credentials)
            let associated = SealedRecordFormat.associatedData(identifier: "user-\(index)", namespace: "bench")
            return (plaintext, associated)
        }
        let clock = ContinuousClock()
        var boxes: [AES.GCM.SealedBox] = []
        boxes.reserveCapacity(operations)
        var start = clock.now
        for operation in 0..<operations {
            let (plaintext, associated) = inputs[operation % identifiers]
            boxes.append(try AES.GCM.seal(plaintext, using: key, nonce: AES.GCM.Nonce(), authenticating: associated))
        }
        let seal = (clock.now - start).inNanoseconds / Double(operations)
        var opened = 0
        start = clock.now
        for (operation, box) in boxes.enumerated() {
            opened += try AES.GCM.open(box, using: key, authenticating: inputs[operation % identifiers].1).count
        }
        let open = (clock.now - start).inNanoseconds / Double(operations)
        guard opened > 0 else { throw BenchmarkError("AES-GCM opened nothing") }
        return (seal, open)
    }

    private static func sealed<Base: TokenStore>(_ base: Base, _ ring: SealingKeyRing) -> any TokenStore {
        SealedTokenStore(base: base, keyRing: ring, namespace: "bench")
    }
    #endif
}
