/// The median, minimum and maximum of a set of repetitions.
struct Summary: Sendable {
    var median: Double
    var min: Double
    var max: Double

    /// `nil` when `values` is empty.
    init?(_ values: [Double]) {
        guard let first = values.first else { return nil }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        median = sorted.count.isMultiple(of: 2) ? (sorted[middle - 1] + sorted[middle]) / 2 : sorted[middle]
        min = sorted.first ?? first
        max = sorted.last ?? first
    }
}

extension Duration {
    /// The duration in nanoseconds, as a `Double`.
    var inNanoseconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) * 1e9 + Double(attoseconds) / 1e9
    }

    /// The duration in seconds, as a `Double`.
    var inSeconds: Double { inNanoseconds / 1e9 }
}

/// `value` rounded to `places` decimal places, for readable JSON.
func rounded(_ value: Double, _ places: Int = 2) -> Double {
    guard value.isFinite else { return 0 }
    var scale = 1.0
    for _ in 0..<places { scale *= 10 }
    return (value * scale).rounded() / scale
}
