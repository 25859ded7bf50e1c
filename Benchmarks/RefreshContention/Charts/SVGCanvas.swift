import Foundation

/// A minimal SVG writer: the benchmark draws its charts itself, with no dependency.
struct SVGCanvas {
    let width: Double
    let height: Double
    private var elements: [String] = []

    init(width: Double, height: Double) {
        self.width = width
        self.height = height
        elements.append(
            #"<rect x="0" y="0" width="\#(Self.n(width))" height="\#(Self.n(height))" fill="white"/>"#)
    }

    enum Anchor: String {
        case start, middle, end
    }

    mutating func line(
        _ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double, color: String, width: Double = 1,
        dashed: Bool = false
    ) {
        let dash = dashed ? #" stroke-dasharray="6 4""# : ""
        elements.append(
            #"<line x1="\#(Self.n(x1))" y1="\#(Self.n(y1))" x2="\#(Self.n(x2))" y2="\#(Self.n(y2))" "#
                + #"stroke="\#(color)" stroke-width="\#(Self.n(width))"\#(dash)/>"#)
    }

    mutating func polyline(_ points: [(Double, Double)], color: String, width: Double, dashed: Bool = false) {
        guard points.count > 1 else { return }
        let list = points.map { "\(Self.n($0.0)),\(Self.n($0.1))" }.joined(separator: " ")
        let dash = dashed ? #" stroke-dasharray="8 5""# : ""
        elements.append(
            #"<polyline points="\#(list)" fill="none" stroke="\#(color)" stroke-width="\#(Self.n(width))" "#
                + #"stroke-linejoin="round"\#(dash)/>"#)
    }

    mutating func circle(_ x: Double, _ y: Double, radius: Double, color: String) {
        elements.append(
            #"<circle cx="\#(Self.n(x))" cy="\#(Self.n(y))" r="\#(Self.n(radius))" fill="\#(color)"/>"#)
    }

    mutating func rect(_ x: Double, _ y: Double, _ width: Double, _ height: Double, color: String) {
        elements.append(
            #"<rect x="\#(Self.n(x))" y="\#(Self.n(y))" width="\#(Self.n(width))" "#
                + #"height="\#(Self.n(height))" fill="\#(color)"/>"#)
    }

    mutating func text(
        _ string: String, x: Double, y: Double, size: Double = 12, anchor: Anchor = .start, bold: Bool = false,
        color: String = "#222222", rotated: Bool = false
    ) {
        let weight = bold ? #" font-weight="bold""# : ""
        let rotation = rotated ? #" transform="rotate(-90 \#(Self.n(x)) \#(Self.n(y)))""# : ""
        elements.append(
            #"<text x="\#(Self.n(x))" y="\#(Self.n(y))" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" "#
                + #"font-size="\#(Self.n(size))" text-anchor="\#(anchor.rawValue)" fill="\#(color)"\#(weight)"#
                + #"\#(rotation)>\#(Self.escape(string))</text>"#)
    }

    func render() -> String {
        var lines = [
            #"<?xml version="1.0" encoding="UTF-8"?>"#,
            #"<svg xmlns="http://www.w3.org/2000/svg" width="\#(Self.n(width))" height="\#(Self.n(height))" "#
                + #"viewBox="0 0 \#(Self.n(width)) \#(Self.n(height))">"#,
        ]
        lines += elements
        lines.append("</svg>")
        return lines.joined(separator: "\n") + "\n"
    }

    /// A coordinate with at most one decimal place.
    private static func n(_ value: Double) -> String {
        let rounded = (value * 10).rounded() / 10
        return rounded == rounded.rounded() ? String(Int(rounded)) : String(format: "%.1f", rounded)
    }

    private static func escape(_ string: String) -> String {
        string.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}

/// The colours of the series, in order; the package's own series always takes the first.
enum ChartPalette {
    static let colors = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"]
    static let grid = "#e4e4e4"
    static let axis = "#444444"

    static func color(_ index: Int) -> String { colors[index % colors.count] }
}
