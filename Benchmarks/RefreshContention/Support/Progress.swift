import Foundation
import Synchronization

/// Human-readable progress, written to standard error so that `--json` output on standard output stays clean.
enum Progress {
    /// Whether standard error is a terminal: progress lines are then redrawn in place.
    static let isTerminal = isatty(STDERR_FILENO) != 0

    /// Writes `message` on a line of its own.
    static func note(_ message: String) {
        // On a terminal, clear a progress line that may be drawn without its newline yet.
        write((isTerminal ? "\r\u{1B}[2K" : "") + message + "\n")
    }

    static func write(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }
}

/// The one progress line of one workload: percentage done, an estimate of the time left, and what ran last.
///
/// Work is counted in units that each workload weighs by its expected cost (for example one unit per waiter in the
/// contention workload), so the estimate (elapsed × remaining units ÷ done units) tracks the real time left. On a
/// terminal the line is redrawn in place with `\r`; otherwise a plain line is printed every 25 % (or 20 s), and a
/// final line when the workload is done.
final class ProgressLine: Sendable {
    private struct State {
        var done = 0.0
        var lastPlainPercent = 0
        var lastPlain: ContinuousClock.Instant
    }

    private let workload: String
    private let total: Double
    private let start: ContinuousClock.Instant
    private let state: Mutex<State>

    init(workload: String, total: Double) {
        self.workload = workload
        self.total = max(total, 1)
        let now = ContinuousClock.now
        self.start = now
        self.state = Mutex(State(lastPlain: now))
        draw(percent: 0, left: nil, detail: "starting", plain: true)
    }

    /// Counts `units` more as done; `detail` names the run that just finished.
    func advance(by units: Double, detail: String) {
        let now = ContinuousClock.now
        let elapsed = (now - start).inSeconds
        let (percent, left, plain) = state.withLock { state -> (Int, Double?, Bool) in
            state.done = min(state.done + units, total)
            let percent = Int((state.done / total * 100).rounded(.down))
            let left = state.done > 0 ? elapsed * (total - state.done) / state.done : nil
            var plain = false
            if !Progress.isTerminal, percent < 100,
                percent >= state.lastPlainPercent + 25 || (now - state.lastPlain) >= .seconds(20)
            {
                plain = true
                state.lastPlainPercent = percent
                state.lastPlain = now
            }
            return (percent, left, plain)
        }
        draw(percent: percent, left: left, detail: detail, plain: plain)
    }

    /// Ends the line: 100 % and the time the workload took.
    func finish() {
        let elapsed = (ContinuousClock.now - start).inSeconds
        let text = "\(label) 100%  done in \(Self.time(elapsed))"
        Progress.write(Progress.isTerminal ? "\r\u{1B}[2K" + text + "\n" : text + "\n")
    }

    private var label: String { workload.padding(toLength: 11, withPad: " ", startingAt: 0) }

    private func draw(percent: Int, left: Double?, detail: String, plain: Bool) {
        guard Progress.isTerminal || plain else { return }
        let bar = String(repeating: "#", count: percent / 5) + String(repeating: ".", count: 20 - percent / 5)
        let remaining = left.map { "~\(Self.time($0)) left" } ?? "estimating"
        let text = "\(label) [\(bar)] \(String(format: "%3d", percent))%  \(remaining)  (\(detail))"
        // Kept short enough not to wrap on an 80-column terminal, where `\r` could not redraw it.
        Progress.write(Progress.isTerminal ? "\r\u{1B}[2K" + String(text.prefix(79)) : text + "\n")
    }

    /// `42 s`, `3 min 05 s`.
    static func time(_ seconds: Double) -> String {
        let whole = Int(seconds.rounded())
        if whole < 60 { return seconds < 10 ? "\(Format.number(seconds, places: 1)) s" : "\(whole) s" }
        return "\(whole / 60) min \(String(format: "%02d", whole % 60)) s"
    }
}
