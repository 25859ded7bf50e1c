import Foundation

/// Compares a ```swift block of the README with the copy of it that a test compiles and runs, so the README's
/// quick starts stay programs that work.
package enum ReadmeBlock {
    /// The repository's root, from this file's path at build time.
    package static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The first difference between the README's first ```swift block after the line `heading` and the lines of
    /// `sourceFile` between `    // BEGIN <marker>` and `    // END <marker>`, or `nil` when they agree.
    ///
    /// The README's block is compared without its `import` lines (and the blank lines that follow them), with each
    /// `substitutions` pair's README text replaced by the test's (each must occur exactly once), and indented by
    /// four spaces.
    package static func difference(
        heading: String, substitutions: [(readme: String, here: String)], sourceFile: String, marker: String
    ) throws -> String? {
        let readme = try String(contentsOf: root.appending(path: "README.md"), encoding: .utf8)
        let source = try String(contentsOf: URL(fileURLWithPath: sourceFile), encoding: .utf8)
        let readmeLines = readme.components(separatedBy: "\n")
        guard let start = readmeLines.firstIndex(of: heading),
            let open = readmeLines[start...].firstIndex(of: "```swift"),
            let close = readmeLines[(open + 1)...].firstIndex(of: "```")
        else { return "the README has no ```swift block under \(heading)" }
        var expected = readmeLines[(open + 1)..<close].filter { !$0.hasPrefix("import ") }
            .drop { $0.isEmpty }.joined(separator: "\n")
        for (readmeText, here) in substitutions {
            guard expected.components(separatedBy: readmeText).count == 2 else {
                return "not exactly once in the README's block: \(readmeText)"
            }
            expected = expected.replacingOccurrences(of: readmeText, with: here)
        }
        expected = expected.components(separatedBy: "\n").map { $0.isEmpty ? "" : "    " + $0 }
            .joined(separator: "\n")
        let sourceLines = source.components(separatedBy: "\n")
        guard let begin = sourceLines.firstIndex(of: "    // BEGIN \(marker)"),
            let end = sourceLines.firstIndex(of: "    // END \(marker)")
        else { return "\(sourceFile) has no BEGIN/END \(marker) markers" }
        let program = sourceLines[(begin + 1)..<end].joined(separator: "\n")
        guard program != expected else { return nil }
        let (a, b) = (program.components(separatedBy: "\n"), expected.components(separatedBy: "\n"))
        let line = (0..<min(a.count, b.count)).first { a[$0] != b[$0] } ?? min(a.count, b.count)
        return """
            the test's program and the README's block under \(heading) differ at line \(line + 1) of the block:
            here:   \(line < a.count ? a[line] : "(end)")
            README: \(line < b.count ? b[line] : "(end)")
            """
    }
}
