import Synchronization

/// A flag the driver raises to make looping tasks stop.
final class StopFlag: Sendable {
    private let raised = Atomic<Bool>(false)

    var isRaised: Bool { raised.load(ordering: .relaxed) }

    func raise() { raised.store(true, ordering: .relaxed) }
}
