import Foundation

/// Number formatting for the tables.
enum Format {
    static func number(_ value: Double, places: Int) -> String {
        String(format: "%.\(places)f", value)
    }

    /// An integer with thousands separators: `100000` → `100,000`.
    static func integer(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var grouped = ""
        for (index, digit) in digits.enumerated() {
            if index > 0, (digits.count - index).isMultiple(of: 3) { grouped.append(",") }
            grouped.append(digit)
        }
        return value < 0 ? "-" + grouped : grouped
    }

    /// `1 ms`, `500 ms`, `2 s`.
    static func duration(_ duration: Duration) -> String {
        let seconds = duration.inSeconds
        if seconds >= 1 { return "\(number(seconds, places: seconds.rounded() == seconds ? 0 : 1)) s" }
        let milliseconds = seconds * 1e3
        return "\(number(milliseconds, places: milliseconds.rounded() == milliseconds ? 0 : 2)) ms"
    }

    /// `median (min..max)`.
    static func summary(_ summary: Summary, places: Int) -> String {
        "\(number(summary.median, places: places)) "
            + "(\(number(summary.min, places: places))..\(number(summary.max, places: places)))"
    }
}

/// A plain-text table with left-aligned labels and right-aligned figures.
struct TextTable {
    var title: String
    var headers: [String]
    /// How many leading columns hold labels (left-aligned).
    var labelColumns: Int
    var rows: [[String]] = []

    func render() -> String {
        var widths = headers.map(\.count)
        for row in rows {
            for (index, cell) in row.enumerated() where index < widths.count {
                widths[index] = max(widths[index], cell.count)
            }
        }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { index, cell in
                let padding = String(repeating: " ", count: max(0, widths[index] - cell.count))
                return index < labelColumns ? cell + padding : padding + cell
            }.joined(separator: "  ")
        }
        var lines = [title, line(headers), widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ")]
        lines += rows.map(line)
        return lines.joined(separator: "\n")
    }
}
