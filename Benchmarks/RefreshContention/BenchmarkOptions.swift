/// Command-line options.
struct BenchmarkOptions {
    /// The workloads, by the names `--only` accepts.
    enum Workload: String, CaseIterable {
        case hotPath = "hot"
        case contention
        case storm
        case fanout
        case sessions
    }

    var quick = false
    var json = false
    var help = false
    var workloads = Set(Workload.allCases)
    /// Overrides the contention workload's numbers of waiters.
    var waiters: [Int]?
    /// Where the SVG charts go; `nil` (`--no-charts`) writes none.
    var chartsDirectory: String? = ".build/benchmarks"

    static let usage = """
        usage: RefreshContention [--quick] [--json] [--only hot,contention,storm,fanout,sessions] [--waiters N,N,...]
                                 [--charts DIR | --no-charts]

          --quick     a reduced set that finishes within about a minute on two cores
          --json      print one JSON document on standard output (progress goes to standard error)
          --only      run only the named workloads
          --waiters   the numbers of callers for the contention workload (default 10,100,1000,10000,100000)
          --charts    write one SVG chart per workload into DIR (default .build/benchmarks)
          --no-charts write no charts

        Exit status: 0 when every coalescing strategy made one refresh per expiry, 1 when one made more,
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
            case "--waiters":
                guard let list = remaining.popFirst() else { throw BenchmarkError("--waiters needs a list of numbers") }
                var counts: [Int] = []
                for item in list.split(separator: ",") {
                    guard let count = Int(item), count > 0 else {
                        throw BenchmarkError("bad number of waiters '\(item)'")
                    }
                    counts.append(count)
                }
                waiters = counts
            default:
                throw BenchmarkError("unknown argument '\(argument)'")
            }
        }
    }
}
