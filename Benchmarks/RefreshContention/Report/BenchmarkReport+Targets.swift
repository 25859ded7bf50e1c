extension BenchmarkReport {
    /// Evaluates the performance targets from the rows: the bars of issue 25 where it set one (hot path, contention,
    /// idle sessions, fan-out, restore storm), those of issues 4, 5 and 13 otherwise. Informational: they never
    /// change the exit status.
    mutating func evaluateTargets() {
        let ours = Strategy.userSessionController.rawValue

        // Hot path: within 1.3x of the floor at one task, and faster than the actor-caching-a-Task idiom, at every T.
        let ourHotPath = hotPath.filter { $0.strategy == ours }
        if ourHotPath.isEmpty {
            targets.append(
                TargetCheck(target: "hot path <= 1.3x BareMutexRead at T=1", holds: nil, detail: "not measured"))
            targets.append(
                TargetCheck(
                    target: "hot path faster than ActorCachedTask at every T", holds: nil, detail: "not measured"))
        } else {
            let ratios = ourHotPath.map { row in (row.tasks, row.ratioToBareMutexRead) }
            targets.append(
                TargetCheck(
                    target: "hot path <= 1.3x BareMutexRead at T=1",
                    holds: ratios.first { $0.0 == 1 }.map { ($0.1 ?? .infinity) <= 1.3 },
                    detail: ratios.map { "T=\($0.0): \($0.1.map { Format.number($0, places: 2) + "x" } ?? "n/a")" }
                        .joined(separator: ", ")))
            let comparisons = ourHotPath.map { row -> (Int, Double, Double?) in
                let idiom = hotPath.first { $0.strategy == Strategy.actorCachedTask.rawValue && $0.tasks == row.tasks }
                return (row.tasks, row.nsPerCall, idiom?.nsPerCall)
            }
            targets.append(
                TargetCheck(
                    target: "hot path faster than ActorCachedTask at every T",
                    holds: comparisons.allSatisfy { $0.1 < ($0.2 ?? -.infinity) },
                    detail: comparisons.map {
                        "T=\($0.0): \(Format.number($0.1, places: 1)) vs "
                            + "\($0.2.map { Format.number($0, places: 1) } ?? "n/a") ns"
                    }.joined(separator: ", ")))
        }

        // Contention: exactly one refresh at every N; overhead within 1.2x of the lock-plus-continuation queue.
        let ourContention = contention.filter { $0.strategy == ours }
        if ourContention.isEmpty {
            targets.append(
                TargetCheck(
                    target: "contention: exactly 1 refresh per expiry at every N", holds: nil, detail: "not measured"))
        } else {
            targets.append(
                TargetCheck(
                    target: "contention: exactly 1 refresh per expiry at every N",
                    holds: ourContention.allSatisfy { $0.refreshes == 1 && $0.refreshesMin == 1 },
                    detail: ourContention.map { row in
                        "N=\(row.waiters): "
                            + (row.refreshes == row.refreshesMin
                                ? "\(row.refreshes)" : "\(row.refreshesMin)..\(row.refreshes)")
                    }.joined(separator: ", ")))
        }
        let largest = 100_000
        let ourLargest = ourContention.first { $0.waiters == largest }
        let queueLargest = contention.first {
            $0.strategy == Strategy.lockedContinuationQueue.rawValue && $0.waiters == largest
        }
        if let ourLargest, let queueLargest {
            let ratio = ourLargest.overheadNsPerWaiter / max(queueLargest.overheadNsPerWaiter, 1e-9)
            let comparable = ourLargest.refreshes == 1 && ourLargest.refreshesMin == 1
            targets.append(
                TargetCheck(
                    target: "contention overhead <= 1.2x LockedContinuationQueue at N = 100,000",
                    holds: comparable && ratio <= 1.2,
                    detail: "\(Format.number(ourLargest.overheadNsPerWaiter, places: 1)) vs "
                        + "\(Format.number(queueLargest.overheadNsPerWaiter, places: 1)) ns/waiter "
                        + "(\(Format.number(ratio, places: 2))x)"
                        + (comparable ? "" : "; not comparable: UserSessionController did not make exactly 1 refresh")))
        } else {
            targets.append(
                TargetCheck(
                    target: "contention overhead <= 1.2x LockedContinuationQueue at N = 100,000", holds: nil,
                    detail: "not measured at N = 100,000"))
        }

        // Storm: one refresh per expiry, and the storm must actually have made tokens expire and get refreshed.
        if let row = storm.first(where: { $0.strategy == ours }) {
            let holds = row.expiries > 0 && row.refreshes == row.expiries
            targets.append(
                TargetCheck(
                    target: "storm: refreshes == expiries",
                    holds: holds,
                    detail: "\(row.refreshes) refreshes for \(row.expiries) expiries"
                        + (row.expiries == 0 ? " (no token was refreshed: expired tokens were handed out)" : "")))
        } else {
            targets.append(TargetCheck(target: "storm: refreshes == expiries", holds: nil, detail: "not measured"))
        }

        // Idle sessions: memory per idle opened session at most 400 B.
        if let row = idleSessions.first {
            targets.append(
                TargetCheck(
                    target: "idle opened session <= 400 B", holds: row.bytesPerSession <= 400,
                    detail: "\(Format.number(row.bytesPerSession, places: 0)) B of heap per session "
                        + "(\(Format.integer(row.sessions)) sessions)"))
        } else {
            targets.append(TargetCheck(target: "idle opened session <= 400 B", holds: nil, detail: "not measured"))
        }

        // Fan-out: within 1.2x of a bare AsyncStream fan-out per delivery at 1,000 and 10,000.
        let fanoutTarget = "fan-out <= 1.2x AsyncStream fan-out per delivery at 1,000 and 10,000 subscribers"
        let comparisons = [1_000, 10_000].compactMap { subscribers -> (Int, Double, Double)? in
            guard let ours = fanout.first(where: { $0.strategy == ours && $0.subscribers == subscribers }),
                let floor = fanout.first(where: {
                    $0.strategy == FanoutWorkload.Source.bareStreams.rawValue && $0.subscribers == subscribers
                })
            else { return nil }
            return (subscribers, ours.nsPerDelivery, floor.nsPerDelivery)
        }
        targets.append(
            TargetCheck(
                target: fanoutTarget,
                holds: comparisons.count == 2 ? comparisons.allSatisfy { $0.1 <= 1.2 * $0.2 } : nil,
                detail: comparisons.isEmpty
                    ? "not measured at 1,000 and 10,000 subscribers"
                    : comparisons.map {
                        "\(Format.integer($0.0)): \(Format.number($0.1, places: 1)) vs "
                            + "\(Format.number($0.2, places: 1)) ns (\(Format.number($0.1 / max($0.2, 1e-9), places: 2))x)"
                    }.joined(separator: ", ")))

        // Restore storm: within 3x of its floor, and faster than the idiom, at every size.
        let stormTarget = "restore storm <= 3.0x its floor and faster than the idiom at every N and U"
        targets.append(
            TargetCheck(
                target: stormTarget,
                holds: restoreStorm.isEmpty
                    ? nil : restoreStorm.allSatisfy { $0.ratioToFloor <= 3.0 && $0.ratioToIdiom < 1.0 },
                detail: restoreStorm.isEmpty
                    ? "not measured"
                    : restoreStorm.map {
                        "N=\(Format.integer($0.requests)) U=\(Format.integer($0.users)): "
                            + "\(Format.number($0.ratioToFloor, places: 1))x floor, "
                            + "\(Format.number($0.ratioToIdiom, places: 2))x idiom"
                    }.joined(separator: ", ")))
    }
}
