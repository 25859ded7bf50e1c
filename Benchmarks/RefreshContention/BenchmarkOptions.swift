/// Command-line options.
struct BenchmarkOptions {
    /// The workloads, by the names `--only` accepts.
    enum Workload: String, CaseIterable {
        case hotPath = "hot"
        case contention
        case storm
        case fanout
        case sessions
        case restoreStorm = "restore"
        case fleet
        case sealing
        case clientCredentials = "client-credentials"
        case clientAssertion = "assertion"
        case callback
    }

    var quick = false
    var json = false
    var help = false
    var workloads = Set(Workload.allCases)
    /// Whether `--only` chose the workloads (`--quick` leaves the fleet out unless it is named).
    var chosen = false
    /// Overrides the contention workload's numbers of waiters.
    var waiters: [Int]?
    /// Override the restore storm's numbers of requests and of stored users.
    var requests: [Int]?
    var users: [Int]?
    /// Where the SVG charts go; `nil` (`--no-charts`) writes none.
    var chartsDirectory: String? = ".build/benchmarks"

    static let usage = """
        usage: RefreshContention [--quick] [--json]
                                 [--only hot,contention,storm,fanout,sessions,restore,fleet,sealing,client-credentials,
                                        assertion]
                                 [--waiters N,N,...] [--requests N,N,...] [--users U,U,...]
                                 [--charts DIR | --no-charts]

          --quick     a reduced set that finishes within about a minute on two cores
          --json      print one JSON document on standard output (progress goes to standard error)
          --only      run only the named workloads (restore: the restore storm after a restart; fleet: K
                      processes sharing one user through one store, left out of --quick unless named; sealing:
                      a store's writes and reads plain and sealed, with the Sealing trait; client-credentials: N
                      callers at the expiry of the server's own token, ClientCredentialsTokenManager against an
                      actor caching a Task per key and a cache without single flight; assertion: an ES256
                      private_key_jwt client assertion per token request, and a DPoP proof per API request
                      against its bearer header, with the OpenIDConnect trait)
          --waiters   the numbers of callers for the contention workload (default 10,100,1000,10000,100000)
          --requests  the numbers of first requests for the restore storm (default 1000,10000)
          --users     the numbers of stored users for the restore storm (default 1,1000)
          --charts    write one SVG chart per workload into DIR (default .build/benchmarks)
          --no-charts write no charts

        Two modes of their own, each with its own options:
          RefreshContention --transport [--quick] [--json]   the HTTP transports and the restart storm over each
                                                             (AsyncHTTPClient trait)
          RefreshContention --web [--quick] [--json] [--seconds S] [--connections N] [--repetitions R]
                                                             a signed-in GET under wrk: bare, the framework's own
                                                             sessions, WebSessionMiddleware (Hummingbird or Vapor trait)

        Exit status: 0 when every invariant holds, 1 when one breaks (a coalescing strategy made more than one
        refresh or token request per expiry, a fleet refreshed other than once per expiry or reused a refresh token, or the restore storm made other than one store load and one restore per user),
        2 when a run failed or did not finish in time. Timings never change the exit status.
        """

    init(arguments: [String]) throws(BenchmarkError) {
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            switch argument {
            case "--quick": quick = true
            case "--json": json = true
            case "--help", "-h": help = true
            case "--no-charts": chartsDirectory = nil
            case "--charts":
                guard let directory = remaining.popFirst(), !directory.isEmpty else {
                    throw BenchmarkError("--charts needs a directory")
                }
                chartsDirectory = directory
            case "--only":
                guard let list = remaining.popFirst() else { throw BenchmarkError("--only needs a list of workloads") }
                var selected: Set<Workload> = []
                for name in list.split(separator: ",") {
                    guard let workload = Workload(rawValue: String(name)) else {
                        throw BenchmarkError("unknown workload '\(name)'")
                    }
                    selected.insert(workload)
                }
                workloads = selected
                chosen = true
            case "--waiters": waiters = try Self.counts(remaining.popFirst(), of: "waiters")
            case "--requests": requests = try Self.counts(remaining.popFirst(), of: "requests")
            case "--users": users = try Self.counts(remaining.popFirst(), of: "users")
            default:
                throw BenchmarkError("unknown argument '\(argument)'")
            }
        }
    }

    /// A comma-separated list of positive numbers, such as `1000,10000`.
    private static func counts(_ list: String?, of what: String) throws(BenchmarkError) -> [Int] {
        guard let list else { throw BenchmarkError("--\(what) needs a list of numbers") }
        var counts: [Int] = []
        for item in list.split(separator: ",") {
            guard let count = Int(item), count > 0 else { throw BenchmarkError("bad number of \(what) '\(item)'") }
            counts.append(count)
        }
        guard !counts.isEmpty else { throw BenchmarkError("--\(what) needs a list of numbers") }
        return counts
    }
}
