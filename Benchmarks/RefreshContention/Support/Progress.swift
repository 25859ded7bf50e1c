import Foundation

/// Human-readable progress, written to standard error so that `--json` output on standard output stays clean.
enum Progress {
    static func note(_ message: String) {
        FileHandle.standardError.write(Data((message + "\n").utf8))
    }
}
