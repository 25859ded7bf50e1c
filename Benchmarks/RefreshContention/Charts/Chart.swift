/// One chart of the report: lines over a numeric x axis, or one bar per strategy; every point carries the
/// median of the repetitions and a whisker from their minimum to their maximum.
struct Chart {
    struct Point {
        var x: Double
        var y: Double
        var low: Double
        var high: Double
    }

    struct Series {
        var name: String
        var points: [Point]
    }

    struct Bar {
        var name: String
        var value: Double
        var low: Double
        var high: Double
    }

    enum Body {
        /// One line per series; `xTicks` labels the measured x values instead of decades.
        case lines([Series], xScale: ChartAxis.Scale, xTicks: [Double]?)
        case bars([Bar])
    }

    /// The file name, without extension.
    var name: String
    var title: String
    var subtitle: String
    var xLabel: String
    var yLabel: String
    var yScale: ChartAxis.Scale
    var body: Body
    /// The name of the series or bar drawn thicker (the package's own).
    var highlighted: String = Strategy.userSessionController.rawValue
    /// A line under the chart that the reader needs to read it right.
    var note: String?

    private static let width = 940.0
    private static let height = 520.0
    private static let plotLeft = 96.0
    private static let plotTop = 78.0
    private static let plotRight = 660.0
    private static let plotBottom = 420.0

    func svg() -> String {
        var canvas = SVGCanvas(width: Self.width, height: Self.height)
        canvas.text(title, x: Self.plotLeft, y: 30, size: 17, bold: true)
        canvas.text(subtitle, x: Self.plotLeft, y: 52, size: 12, color: "#555555")

        let values: [Double]
        switch body {
        case .lines(let series, _, _): values = series.flatMap { $0.points.flatMap { [$0.low, $0.y, $0.high] } }
        case .bars(let bars): values = bars.flatMap { [$0.low, $0.value, $0.high] }
        }
        let yAxis = ChartAxis(scale: yScale, values: values)
        drawYAxis(yAxis, on: &canvas)

        switch body {
        case .lines(let series, let xScale, let xTicks):
            let xAxis = ChartAxis(
                scale: xScale, values: series.flatMap { $0.points.map(\.x) } + (xTicks ?? []), ticks: xTicks)
            drawXAxis(xAxis, on: &canvas)
            for (index, line) in series.enumerated() {
                drawLine(line, color: ChartPalette.color(index), xAxis: xAxis, yAxis: yAxis, on: &canvas)
            }
            drawLegend(series.map(\.name), on: &canvas)
        case .bars(let bars):
            drawBars(bars, yAxis: yAxis, on: &canvas)
            drawLegend(bars.map(\.name), on: &canvas)
        }

        canvas.line(Self.plotLeft, Self.plotBottom, Self.plotRight, Self.plotBottom, color: ChartPalette.axis)
        canvas.line(Self.plotLeft, Self.plotTop, Self.plotLeft, Self.plotBottom, color: ChartPalette.axis)
        canvas.text(xLabel, x: (Self.plotLeft + Self.plotRight) / 2, y: Self.plotBottom + 42, size: 13, anchor: .middle)
        canvas.text(
            yLabel, x: 24, y: (Self.plotTop + Self.plotBottom) / 2, size: 13, anchor: .middle, rotated: true)
        let marks = if case .bars = body { "Bars" } else { "Markers" }
        canvas.text(
            "\(marks): median of the repetitions; whiskers: their minimum and maximum.", x: Self.plotLeft,
            y: Self.height - 30, size: 11, color: "#666666")
        if let note { canvas.text(note, x: Self.plotLeft, y: Self.height - 12, size: 11, color: "#666666") }
        return canvas.render()
    }

    private func yPosition(_ value: Double, _ axis: ChartAxis) -> Double {
        Self.plotBottom - axis.fraction(value) * (Self.plotBottom - Self.plotTop)
    }

    private func xPosition(_ value: Double, _ axis: ChartAxis) -> Double {
        Self.plotLeft + axis.fraction(value) * (Self.plotRight - Self.plotLeft)
    }

    private func drawYAxis(_ axis: ChartAxis, on canvas: inout SVGCanvas) {
        for tick in axis.minorTicks where tick <= axis.high {
            let y = yPosition(tick, axis)
            canvas.line(Self.plotLeft, y, Self.plotRight, y, color: "#f2f2f2")
        }
        for tick in axis.ticks where tick <= axis.high * 1.0001 {
            let y = yPosition(tick, axis)
            canvas.line(Self.plotLeft, y, Self.plotRight, y, color: ChartPalette.grid)
            canvas.line(Self.plotLeft - 5, y, Self.plotLeft, y, color: ChartPalette.axis)
            canvas.text(ChartAxis.label(tick), x: Self.plotLeft - 9, y: y + 4, size: 12, anchor: .end)
        }
    }

    private func drawXAxis(_ axis: ChartAxis, on canvas: inout SVGCanvas) {
        for tick in axis.minorTicks where tick <= axis.high {
            let x = xPosition(tick, axis)
            canvas.line(x, Self.plotTop, x, Self.plotBottom, color: "#f2f2f2")
        }
        for tick in axis.ticks {
            let x = xPosition(tick, axis)
            canvas.line(x, Self.plotTop, x, Self.plotBottom, color: ChartPalette.grid)
            canvas.line(x, Self.plotBottom, x, Self.plotBottom + 5, color: ChartPalette.axis)
            canvas.text(ChartAxis.label(tick), x: x, y: Self.plotBottom + 20, size: 12, anchor: .middle)
        }
    }

    private func drawLine(
        _ series: Series, color: String, xAxis: ChartAxis, yAxis: ChartAxis, on canvas: inout SVGCanvas
    ) {
        let emphasis = series.name == highlighted
        let points = series.points.sorted { $0.x < $1.x }
        canvas.polyline(
            points.map { (xPosition($0.x, xAxis), yPosition($0.y, yAxis)) }, color: color, width: emphasis ? 3.5 : 2,
            dashed: Self.isDashed(series.name))
        for point in points {
            let x = xPosition(point.x, xAxis)
            drawWhisker(
                x: x, low: yPosition(point.low, yAxis), high: yPosition(point.high, yAxis), color: color, on: &canvas)
            canvas.circle(x, yPosition(point.y, yAxis), radius: emphasis ? 4.5 : 3.5, color: color)
        }
    }

    private func drawBars(_ bars: [Bar], yAxis: ChartAxis, on canvas: inout SVGCanvas) {
        let slot = (Self.plotRight - Self.plotLeft) / Double(max(bars.count, 1))
        let barWidth = min(slot * 0.6, 90)
        for (index, bar) in bars.enumerated() {
            let center = Self.plotLeft + slot * (Double(index) + 0.5)
            let top = yPosition(bar.value, yAxis)
            canvas.rect(
                center - barWidth / 2, top, barWidth, Self.plotBottom - top, color: ChartPalette.color(index))
            drawWhisker(
                x: center, low: yPosition(bar.low, yAxis), high: yPosition(bar.high, yAxis), color: "#222222",
                on: &canvas)
            canvas.text(
                ChartAxis.label(bar.value), x: center, y: min(top, yPosition(bar.high, yAxis)) - 8, size: 12,
                anchor: .middle, bold: bar.name == highlighted)
        }
    }

    /// Floors and the default configuration are dashed, so that they stand apart from the strategies.
    private static func isDashed(_ name: String) -> Bool {
        name.hasPrefix("AsyncStream") || name.contains("(default)") || name.hasPrefix("floor")
    }

    private func drawWhisker(x: Double, low: Double, high: Double, color: String, on canvas: inout SVGCanvas) {
        guard abs(low - high) >= 1 else { return }
        canvas.line(x, low, x, high, color: color, width: 1.2)
        canvas.line(x - 4, low, x + 4, low, color: color, width: 1.2)
        canvas.line(x - 4, high, x + 4, high, color: color, width: 1.2)
    }

    private func drawLegend(_ names: [String], on canvas: inout SVGCanvas) {
        let left = Self.plotRight + 22
        canvas.text("Legend", x: left, y: Self.plotTop + 4, size: 13, bold: true)
        for (index, name) in names.enumerated() {
            let y = Self.plotTop + 28 + Double(index) * 24
            let color = ChartPalette.color(index)
            if case .bars = body {
                canvas.rect(left, y - 10, 22, 12, color: color)
            } else {
                canvas.line(
                    left, y - 4, left + 22, y - 4, color: color, width: name == highlighted ? 3.5 : 2,
                    dashed: Self.isDashed(name))
                canvas.circle(left + 11, y - 4, radius: 3.5, color: color)
            }
            canvas.text(name, x: left + 30, y: y, size: 12, bold: name == highlighted)
        }
    }
}
