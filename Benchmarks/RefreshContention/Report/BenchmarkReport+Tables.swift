extension BenchmarkReport {
    /// The readable form: one table per workload, then invariants, targets and failures.
    func renderTables(plan: BenchmarkPlan) -> String {
        var sections: [String] = [
            "RefreshContention (\(mode), \(repetitions) repetitions; figures are median (min..max))\n"
                + Explanations.render([Explanations.general]),
            "Strategies (the real libraries or idioms each baseline reproduces)\n"
                + Explanations.render(Explanations.strategies),
        ]

        if !hotPath.isEmpty {
            var table = TextTable(
                title: "A. Hot path: fresh token, \(Format.integer(plan.hotPathCalls)) calls per configuration",
                headers: ["strategy", "tasks", "ns/call", "x BareMutexRead"], labelColumns: 1)
            for row in hotPath {
                table.rows.append([
                    row.strategy, "\(row.tasks)",
                    Format.summary(
                        Summary(median: row.nsPerCall, min: row.nsPerCallMin, max: row.nsPerCallMax), places: 1),
                    row.ratioToBareMutexRead.map { Format.number($0, places: 2) } ?? "-",
                ])
            }
            sections.append(table.render() + "\n" + Explanations.render(Explanations.hotPath))
        }

        if !contention.isEmpty {
            var table = TextTable(
                title: "B. Contention at expiry: N callers released together, refresher latency "
                    + "\(Format.duration(plan.contentionLatency))",
                headers: [
                    "strategy", "waiters", "refreshes", "wall ms", "overhead ns/waiter", "RSS B/waiter", "stale",
                    "failed",
                ],
                labelColumns: 1)
            for row in contention {
                table.rows.append([
                    row.strategy, Format.integer(row.waiters),
                    row.refreshes == row.refreshesMin ? "\(row.refreshes)" : "\(row.refreshesMin)..\(row.refreshes)",
                    Format.summary(Summary(median: row.wallMs, min: row.wallMsMin, max: row.wallMsMax), places: 2),
                    Format.summary(
                        Summary(
                            median: row.overheadNsPerWaiter, min: row.overheadNsPerWaiterMin,
                            max: row.overheadNsPerWaiterMax), places: 0),
                    row.rssBytesPerWaiter.map { Format.number($0, places: 0) } ?? "-",
                    "\(row.staleResults)", "\(row.failedCalls)",
                ])
            }
            sections.append(table.render() + "\n" + Explanations.render(Explanations.contention))
        }

        if !storm.isEmpty {
            var table = TextTable(
                title: "C. Storm: \(plan.stormTasks) tasks for \(Format.duration(plan.stormDuration)), tokens live "
                    + "\(Format.duration(plan.stormTokenLifetime)), refresher latency "
                    + "\(Format.duration(plan.stormLatency)) "
                    + "(expiries and refreshes summed over repetitions)",
                headers: ["strategy", "expiries", "refreshes", "calls/s", "failed"], labelColumns: 1)
            for row in storm {
                table.rows.append([
                    row.strategy, Format.integer(row.expiries), Format.integer(row.refreshes),
                    Format.summary(
                        Summary(median: row.callsPerSecond, min: row.callsPerSecondMin, max: row.callsPerSecondMax),
                        places: 0),
                    "\(row.failedCalls)",
                ])
            }
            sections.append(table.render() + "\n" + Explanations.render(Explanations.storm))
        }

        if !fanout.isEmpty {
            var table = TextTable(
                title: "D. Event fan-out: open/close transitions, one event each, to every subscriber",
                headers: [
                    "strategy", "subscribers", "events", "deliveries", "ns/delivery", "x AsyncStream",
                    "RSS B/subscriber", "RSS growth B",
                ],
                labelColumns: 1)
            for row in fanout {
                table.rows.append([
                    row.strategy, Format.integer(row.subscribers), Format.integer(row.events),
                    Format.integer(row.deliveries),
                    Format.summary(
                        Summary(median: row.nsPerDelivery, min: row.nsPerDeliveryMin, max: row.nsPerDeliveryMax),
                        places: 0),
                    row.ratioToAsyncStream.map { Format.number($0, places: 2) } ?? "-",
                    row.rssBytesPerSubscriber.map { Format.number($0, places: 0) } ?? "-",
                    row.rssGrowthBytesDuringTransitions.map { Format.integer(Int($0)) } ?? "-",
                ])
            }
            sections.append(table.render() + "\n" + Explanations.render(Explanations.fanout))
        }

        if !idleSessions.isEmpty {
            var table = TextTable(
                title: "E. Idle opened sessions: UserSessionController through UserSessionRegistry",
                headers: ["sessions", "heap B/session", "floor B/entry", "x floor", "RSS B/session"], labelColumns: 0)
            for row in idleSessions {
                let floor = row.bareCredentialsBytesPerEntry.map { floor in
                    Summary(
                        median: floor, min: row.bareCredentialsBytesPerEntryMin ?? floor,
                        max: row.bareCredentialsBytesPerEntryMax ?? floor)
                }
                table.rows.append([
                    Format.integer(row.sessions),
                    Format.summary(
                        Summary(median: row.bytesPerSession, min: row.bytesPerSessionMin, max: row.bytesPerSessionMax),
                        places: 0),
                    floor.map { Format.summary($0, places: 0) } ?? "-",
                    floor.map { Format.number(row.bytesPerSession / max($0.median, 1), places: 1) } ?? "-",
                    row.residentBytesPerSession.map { Format.number($0, places: 0) } ?? "-",
                ])
            }
            sections.append(table.render() + "\n" + Explanations.render(Explanations.idleSessions))
        }

        if let section = restoreStormSection() { sections.append(section) }
        if let section = fleetSection() { sections.append(section) }
        if let section = sealingSection() { sections.append(section) }
        if let section = clientAssertionSection() { sections.append(section) }
        if let section = callbackValidationSection() { sections.append(section) }
        if let section = clientCredentialsSection() { sections.append(section) }

        if !notes.isEmpty {
            sections.append((["Notes"] + notes.map { "  \($0)" }).joined(separator: "\n"))
        }

        var invariants = [
            "Invariants: one refresh per expiry for coalescing strategies; one store load and one restore per user "
                + "in the restore storm; one refresh per expiry and no reuse detected across a fleet; one token "
                + "request per expiry of the server's own token"
        ]
        if invariantViolations.isEmpty {
            invariants.append("  holds")
        } else {
            invariants += invariantViolations.map { "  BROKEN: \($0)" }
        }
        invariants += expectedViolations.map { "  expected (no coalescing): \($0)" }
        sections.append(invariants.joined(separator: "\n"))

        var targetLines = ["Targets for UserSessionController (informational, never the exit status)"]
        for check in targets {
            let verdict = check.holds.map { $0 ? "holds " : "MISSED" } ?? "n/a   "
            targetLines.append("  [\(verdict)] \(check.target): \(check.detail)")
        }
        sections.append(targetLines.joined(separator: "\n"))

        if !failures.isEmpty {
            sections.append((["Failures"] + failures.map { "  \($0)" }).joined(separator: "\n"))
        }
        sections.append("Exit status: \(exitStatus)")
        return sections.joined(separator: "\n\n")
    }
}

extension Summary {
    init(median: Double, min: Double, max: Double) {
        self.median = median
        self.min = min
        self.max = max
    }
}
