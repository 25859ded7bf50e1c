import Foundation

/// One axis of a chart: its scale, its range and where its ticks go.
struct ChartAxis {
    enum Scale {
        case linear
        case logarithmic
    }

    let scale: Scale
    let low: Double
    let high: Double
    /// Labelled ticks, in data units.
    let ticks: [Double]
    /// Unlabelled grid lines between the ticks (2…9 × each decade on a logarithmic axis).
    let minorTicks: [Double]

    /// An axis covering `values`: decades on a logarithmic scale, a round step from zero on a linear one; `ticks`,
    /// when given, replaces the computed labelled ticks (for example the measured task counts).
    init(scale: Scale, values: [Double], ticks fixedTicks: [Double]? = nil) {
        self.scale = scale
        let finite = values.filter { $0.isFinite && (scale == .linear || $0 > 0) }
        let smallest = finite.min() ?? 1
        let largest = finite.max() ?? 1
        switch scale {
        case .logarithmic:
            // Bounds on the 1-2-5 sequence just outside the data, ticks at 1, 2 and 5 times each power of ten.
            let lowDecade = floor(log10(smallest))
            let highDecade = ceil(log10(largest))
            let steps = stride(from: lowDecade, through: highDecade, by: 1).flatMap { decade in
                [1.0, 2, 5].map { $0 * pow(10, decade) }
            }
            let lowBound = steps.last { $0 <= smallest * 1.0001 } ?? pow(10, lowDecade)
            var highBound = steps.first { $0 >= largest * 0.9999 } ?? pow(10, highDecade)
            if highBound <= lowBound { highBound = lowBound * 10 }
            low = lowBound
            high = highBound
            let inside = steps.filter { $0 >= lowBound && $0 <= highBound }
            // Beyond three decades, label only the powers of ten (and the bounds).
            let labelled =
                highDecade - lowDecade > 3
                ? inside.filter { $0 == lowBound || $0 == highBound || log10($0) == log10($0).rounded() } : inside
            ticks = fixedTicks ?? labelled
            minorTicks =
                fixedTicks == nil
                ? stride(from: lowDecade, through: highDecade, by: 1).flatMap { decade in
                    (2...9).map { Double($0) * pow(10, decade) }
                }.filter { $0 > lowBound && $0 < highBound } : []
        case .linear:
            let top = max(largest, 1e-9) * 1.08
            let step = Self.roundStep(top / 5)
            low = 0
            high = (top / step).rounded(.up) * step
            ticks = fixedTicks ?? stride(from: 0, through: high + step / 2, by: step).map { $0 }
            minorTicks = []
        }
    }

    /// Where `value` falls, from 0 (low end) to 1 (high end).
    func fraction(_ value: Double) -> Double {
        switch scale {
        case .linear:
            return (value - low) / (high - low)
        case .logarithmic:
            guard value > 0 else { return 0 }
            return (log10(value) - log10(low)) / (log10(high) - log10(low))
        }
    }

    /// 1, 2 or 5 times a power of ten, at least `raw`.
    private static func roundStep(_ raw: Double) -> Double {
        let magnitude = pow(10, floor(log10(raw)))
        for factor in [1.0, 2, 5, 10] where factor * magnitude >= raw { return factor * magnitude }
        return 10 * magnitude
    }

    /// A short label: `0.1`, `25`, `1k`, `100k`, `1.5M`.
    static func label(_ value: Double) -> String {
        let magnitude = abs(value)
        func trimmed(_ number: Double) -> String {
            number == number.rounded() ? String(Int(number)) : Format.number(number, places: number < 10 ? 1 : 0)
        }
        if magnitude >= 1e6 { return trimmed(value / 1e6) + "M" }
        if magnitude >= 1e3 { return trimmed(value / 1e3) + "k" }
        if magnitude >= 1 || magnitude == 0 { return trimmed(value) }
        return Format.number(value, places: magnitude >= 0.1 ? 1 : magnitude >= 0.01 ? 2 : 3)
    }
}
