import Foundation

// RefreshContention: the package's refresh gate against peer baselines. See BenchmarkOptions.usage.
do {
    let options = try BenchmarkOptions(arguments: Array(CommandLine.arguments.dropFirst()))
    if options.help {
        print(BenchmarkOptions.usage)
        exit(0)
    }
    exit(await RefreshContentionBenchmark(options: options).run())
} catch {
    Progress.note("RefreshContention: \(error)\n\n\(BenchmarkOptions.usage)")
    exit(64)
}
