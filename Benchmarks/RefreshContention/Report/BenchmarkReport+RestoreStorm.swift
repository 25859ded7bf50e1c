/// Workload F, one number of requests over one number of stored users. Counts are the largest (and `…Min` the
/// smallest) of any repetition; times are medians with their minimum and maximum.
struct RestoreStormRow: Encodable {
    /// N: first requests released together after the restart.
    var requests: Int
    /// U: stored users they are spread over (request `i` is for user `i % U`).
    var users: Int
    /// Store loads during the storm; must be `min(requests, users)`, one per user asked for, in every repetition.
    var loads: Int
    var loadsMin: Int
    /// Sessions restored during the storm; must be `min(requests, users)` in every repetition.
    var restores: Int
    var restoresMin: Int
    var wallMs: Double
    var wallMsMin: Double
    var wallMsMax: Double
    /// Library wall time / N.
    var nsPerRequest: Double
    var nsPerRequestMin: Double
    var nsPerRequestMax: Double
    /// The floor (a dictionary lookup per request plus one store load per user), same shape.
    var floorWallMs: Double
    var floorNsPerRequest: Double
    var floorNsPerRequestMin: Double
    var floorNsPerRequestMax: Double
    var floorLoads: Int
    /// `nsPerRequest` / `floorNsPerRequest`.
    var ratioToFloor: Double
    /// (library wall − floor wall) / N, from the medians.
    var overheadNsPerRequest: Double
    /// The same N requests once every session is open (`session(for:)` and `accessToken()`), wall / N.
    var warmNsPerRequest: Double
    /// `accessToken()` of the already-open controllers only, same N tasks, wall / N: the hot path.
    var hotPathNsPerCall: Double
    var hotPathNsPerCallMin: Double
    var hotPathNsPerCallMax: Double
    /// `registry.shutdown()` afterwards, wall / sessions closed: what closing an idle open session costs.
    var shutdownNsPerSession: Double
    var shutdownNsPerSessionMin: Double
    var shutdownNsPerSessionMax: Double
    /// Requests that threw or got another user's token, in any pass (largest count of any repetition).
    var failedRequests: Int
    /// The idiom (an actor keeping `[identifier: Task<UserSessionController, Error>]`), same shape: wall / N.
    var idiomNsPerRequest: Double
    var idiomNsPerRequestMin: Double
    var idiomNsPerRequestMax: Double
    /// `nsPerRequest` / `idiomNsPerRequest`: below 1, the registry is faster than the idiom.
    var ratioToIdiom: Double
    /// The idiom's store loads and restores (largest of any repetition); it keeps the same invariant.
    var idiomLoads: Int
    var idiomRestores: Int
}

extension BenchmarkReport {
    /// Adds workload F's rows and checks its invariant: exactly U store loads and U restores.
    mutating func add(_ outcome: RestoreStormWorkload.Outcome, plan: BenchmarkPlan) {
        failures += outcome.failures
        for configuration in RestoreStormWorkload.configurations(plan) {
            guard let samples = outcome.samples[configuration], !samples.isEmpty else { continue }
            let requests = Double(configuration.requests)
            guard let wall = Summary(samples.map { $0.wall.inNanoseconds }),
                let floor = Summary(samples.map { $0.floorWall.inNanoseconds }),
                let warm = Summary(samples.map(\.warmNsPerRequest)),
                let hot = Summary(samples.map(\.hotNsPerCall)),
                let shutdown = Summary(samples.map(\.shutdownNsPerSession)),
                let idiom = Summary(samples.map { $0.idiomWall.inNanoseconds })
            else { continue }
            let loads = samples.map(\.loads)
            let restores = samples.map(\.restores)
            let row = RestoreStormRow(
                requests: configuration.requests, users: configuration.users, loads: loads.max() ?? 0,
                loadsMin: loads.min() ?? 0, restores: restores.max() ?? 0, restoresMin: restores.min() ?? 0,
                wallMs: rounded(wall.median / 1e6, 3), wallMsMin: rounded(wall.min / 1e6, 3),
                wallMsMax: rounded(wall.max / 1e6, 3), nsPerRequest: rounded(wall.median / requests, 1),
                nsPerRequestMin: rounded(wall.min / requests, 1), nsPerRequestMax: rounded(wall.max / requests, 1),
                floorWallMs: rounded(floor.median / 1e6, 3), floorNsPerRequest: rounded(floor.median / requests, 1),
                floorNsPerRequestMin: rounded(floor.min / requests, 1),
                floorNsPerRequestMax: rounded(floor.max / requests, 1),
                floorLoads: samples.map(\.floorLoads).max() ?? 0,
                ratioToFloor: rounded(wall.median / max(floor.median, 1), 2),
                overheadNsPerRequest: rounded((wall.median - floor.median) / requests, 1),
                warmNsPerRequest: rounded(warm.median, 1), hotPathNsPerCall: rounded(hot.median, 1),
                hotPathNsPerCallMin: rounded(hot.min, 1), hotPathNsPerCallMax: rounded(hot.max, 1),
                shutdownNsPerSession: rounded(shutdown.median, 1), shutdownNsPerSessionMin: rounded(shutdown.min, 1),
                shutdownNsPerSessionMax: rounded(shutdown.max, 1),
                failedRequests: samples.map(\.failedRequests).max() ?? 0,
                idiomNsPerRequest: rounded(idiom.median / requests, 1),
                idiomNsPerRequestMin: rounded(idiom.min / requests, 1),
                idiomNsPerRequestMax: rounded(idiom.max / requests, 1),
                ratioToIdiom: rounded(wall.median / max(idiom.median, 1), 2),
                idiomLoads: samples.map(\.idiomLoads).max() ?? 0, idiomRestores: samples.map(\.idiomRestores).max() ?? 0
            )
            restoreStorm.append(row)
            // Request i is for user i % U: every stored user is asked for when N >= U.
            let users = min(configuration.users, configuration.requests)
            let label = "N=\(configuration.requests) U=\(configuration.users)"
            if row.loads != users || row.loadsMin != users || row.restores != users || row.restoresMin != users {
                invariantViolations.append(
                    "restore storm \(label): \(Self.range(row.loadsMin, row.loads)) store loads and "
                        + "\(Self.range(row.restoresMin, row.restores)) restores for \(users) users asked for")
            }
            if let extra = samples.map(\.loadsWhileOpen).max(), extra > 0 {
                failures.append("restore storm \(label): \(extra) store loads while every session was open")
            }
            if row.failedRequests > 0 {
                failures.append("restore storm \(label): \(row.failedRequests) requests failed or got a wrong token")
            }
            let idiomFailed = samples.map(\.idiomFailedRequests).max() ?? 0
            let idiomCounts = (samples.map(\.idiomLoads).min() ?? 0, samples.map(\.idiomRestores).min() ?? 0)
            if idiomFailed > 0 || row.idiomLoads != users || idiomCounts.0 != users || row.idiomRestores != users
                || idiomCounts.1 != users
            {
                failures.append(
                    "restore storm \(label): the idiom made \(row.idiomLoads) loads and \(row.idiomRestores) restores "
                        + "for \(users) users, \(idiomFailed) requests failed: it is not a fair comparison")
            }
        }
    }

    /// `a` or `a..b`.
    static func range(_ low: Int, _ high: Int) -> String {
        low == high ? Format.integer(high) : "\(Format.integer(low))..\(Format.integer(high))"
    }

    /// Workload F's table with its explanations, or `nil` when it did not run.
    func restoreStormSection() -> String? {
        guard !restoreStorm.isEmpty else { return nil }
        var table = TextTable(
            title: "F. Restore storm: N first requests after a restart over U stored users, "
                + "registry.session(for:) then accessToken()",
            headers: [
                "requests", "users", "loads", "restores", "wall ms", "ns/request", "floor ns/request", "x floor",
                "overhead ns/request", "idiom ns/request", "x idiom", "warm ns/request", "hot ns/call",
                "shutdown ns/session", "failed",
            ],
            labelColumns: 0)
        for row in restoreStorm {
            table.rows.append([
                Format.integer(row.requests), Format.integer(row.users), Self.range(row.loadsMin, row.loads),
                Self.range(row.restoresMin, row.restores),
                Format.summary(Summary(median: row.wallMs, min: row.wallMsMin, max: row.wallMsMax), places: 2),
                Format.summary(
                    Summary(median: row.nsPerRequest, min: row.nsPerRequestMin, max: row.nsPerRequestMax), places: 0),
                Format.summary(
                    Summary(
                        median: row.floorNsPerRequest, min: row.floorNsPerRequestMin, max: row.floorNsPerRequestMax),
                    places: 0),
                Format.number(row.ratioToFloor, places: 1), Format.number(row.overheadNsPerRequest, places: 0),
                Format.summary(
                    Summary(
                        median: row.idiomNsPerRequest, min: row.idiomNsPerRequestMin, max: row.idiomNsPerRequestMax),
                    places: 0),
                Format.number(row.ratioToIdiom, places: 2), Format.number(row.warmNsPerRequest, places: 0),
                Format.summary(
                    Summary(median: row.hotPathNsPerCall, min: row.hotPathNsPerCallMin, max: row.hotPathNsPerCallMax),
                    places: 0),
                Format.summary(
                    Summary(
                        median: row.shutdownNsPerSession, min: row.shutdownNsPerSessionMin,
                        max: row.shutdownNsPerSessionMax),
                    places: 0),
                "\(row.failedRequests)",
            ])
        }
        return table.render() + "\n" + Explanations.render(Explanations.restoreStorm)
    }

    /// Workload F's chart: ns per request against N, one line per (who, U).
    func restoreStormChart(plan: BenchmarkPlan, mode: String) -> Chart? {
        guard !restoreStorm.isEmpty else { return nil }
        var series: [Chart.Series] = []
        func add(_ name: String, _ point: (RestoreStormRow) -> Chart.Point) {
            for users in plan.restoreStormUsers {
                let points = restoreStorm.filter { $0.users == users }.map(point)
                if !points.isEmpty {
                    series.append(Chart.Series(name: "\(name), U = \(Format.integer(users))", points: points))
                }
            }
        }
        add(Self.restoreStormName) {
            Chart.Point(x: Double($0.requests), y: $0.nsPerRequest, low: $0.nsPerRequestMin, high: $0.nsPerRequestMax)
        }
        add(Self.restoreStormFloorName) {
            Chart.Point(
                x: Double($0.requests), y: $0.floorNsPerRequest, low: $0.floorNsPerRequestMin,
                high: $0.floorNsPerRequestMax)
        }
        add(Self.restoreStormIdiomName) {
            Chart.Point(
                x: Double($0.requests), y: $0.idiomNsPerRequest, low: $0.idiomNsPerRequestMin,
                high: $0.idiomNsPerRequestMax)
        }
        add(Self.restoreStormHotName) {
            Chart.Point(
                x: Double($0.requests), y: $0.hotPathNsPerCall, low: $0.hotPathNsPerCallMin,
                high: $0.hotPathNsPerCallMax)
        }
        return Chart(
            name: "restore-storm", title: "F. Restore storm: first requests after a restart",
            subtitle: "N requests released together over U stored users, each session(for:) then accessToken(); "
                + mode,
            xLabel: "N concurrent first requests (log scale)", yLabel: "ns per request, wall / N (log scale)",
            yScale: .logarithmic,
            body: .lines(series, xScale: .logarithmic, xTicks: plan.restoreStormRequests.map(Double.init)),
            highlighted: "\(Self.restoreStormName), U = \(Format.integer(plan.restoreStormUsers.last ?? 1))",
            note: "floor: a dictionary lookup per request plus one store load per user, no waiting; idiom: an actor "
                + "keeping [identifier: Task<UserSessionController, Error>]; open session: accessToken() once restored."
        )
    }

    static let restoreStormName = "UserSessionRegistry"
    static let restoreStormFloorName = "floor"
    static let restoreStormHotName = "open session"
    static let restoreStormIdiomName = "idiom: actor of restore tasks"
}
