import Foundation

// RefreshContention: the package's refresh gate against peer baselines. See BenchmarkOptions.usage.
if CommandLine.arguments.dropFirst().first == "--transport" {
    // The HTTP transports side by side (Workloads/TransportWorkload.swift); needs the AsyncHTTPClient trait.
    #if AsyncHTTPClient
    exit(await TransportWorkload.main(arguments: Array(CommandLine.arguments.dropFirst(2))))
    #else
    FileHandle.standardError.write(
        Data("--transport needs the AsyncHTTPClient trait: swift run -c release --traits AsyncHTTPClient ...\n".utf8))
    exit(64)
    #endif
}
if CommandLine.arguments.dropFirst().first == "--web" || CommandLine.arguments.dropFirst().first == "--web-server" {
    // The web request overhead under wrk (Web/WebOverheadWorkload.swift), and the server it starts per
    // configuration (Web/WebOverheadServer.swift); needs the Hummingbird or the Vapor trait.
    #if Hummingbird || Vapor
    let rest = Array(CommandLine.arguments.dropFirst(2))
    exit(
        CommandLine.arguments[1] == WebOverheadServer.flag
            ? await WebOverheadServer.main(arguments: rest) : await WebOverheadWorkload.main(arguments: rest))
    #else
    FileHandle.standardError.write(
        Data("--web needs the Hummingbird or Vapor trait: swift run -c release --traits Hummingbird,Vapor ...\n".utf8))
    exit(64)
    #endif
}
if CommandLine.arguments.dropFirst().first == FleetNode.flag {
    // One process of the fleet workload, started by the workload itself (Fleet/FleetNode.swift).
    exit(await FleetNode.main(arguments: Array(CommandLine.arguments.dropFirst(2))))
}
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
