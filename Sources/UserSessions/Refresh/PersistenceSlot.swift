/// Who may write to the token store now: one writer at a time, the others queued in arrival order.
///
/// Writes are serialized so an older write can never land after a newer one, a clear is ordered against every
/// write, and `deactivate()` can wait for the write in progress. A pure state machine over one ``FIFOLanes`` lane:
/// one `mutating func` per input, each returning what the gate must do once it has released its lock (resume the
/// next writer). ``CredentialsGate/withPersistSlot(_:)`` is its only user, so an acquisition is always paired with
/// its release.
struct PersistenceSlot {
    private typealias Lanes = FIFOLanes<SingleLane, UnsafeContinuation<Void, Never>>

    /// What the gate must do after an input.
    enum Action {
        case none
        /// Resume this writer: the slot is now its.
        case resume(UnsafeContinuation<Void, Never>)
    }

    private var lanes = Lanes()

    /// Whether some writer holds the slot.
    var isHeld: Bool { lanes.isBusy }

    /// A new place in line. The writer then asks for the slot with ``tryAcquire(ticket:)`` and, when it does not get
    /// it, must wait with ``enqueue(ticket:continuation:)``: the slot is kept for it when its turn comes.
    mutating func makeTicket() -> UInt64 {
        lanes.enter().ticket.number
    }

    /// `ticket` asks for the slot without waiting: `true` when it got it (it is first in line).
    func tryAcquire(ticket: UInt64) -> Bool {
        lanes.isRunning(Self.ticket(ticket))
    }

    /// `ticket` waits for the slot with `continuation`. Returns `.resume(continuation)` when the slot became its in
    /// the meantime (the caller resumes it itself), `.none` when it was queued.
    mutating func enqueue(ticket: UInt64, continuation: UnsafeContinuation<Void, Never>) -> Action {
        Action(lanes.park(continuation, for: Self.ticket(ticket)))
    }

    /// `ticket` is done writing: the slot goes to the next writer in line. A holder whose slot was taken away by
    /// ``abandon()`` releases nothing.
    mutating func release(ticket: UInt64) -> Action {
        Action(lanes.leave(Self.ticket(ticket)))
    }

    /// Takes the slot away from a holder that overran the store timeout (its store ignores cancellation), so that
    /// later writes are not blocked for ever. When that write returns, ``finishWrite(ticket:)`` says so.
    mutating func abandon() -> Action {
        Action(lanes.abandon())
    }

    /// The write of `ticket` returned: `true` when its slot had been taken away, so it may have landed out of
    /// order and must be repaired. Stays `true` for every write of that ticket until it releases.
    func finishWrite(ticket: UInt64) -> Bool {
        lanes.wasAbandoned(Self.ticket(ticket))
    }

    private static func ticket(_ number: UInt64) -> Lanes.Ticket {
        Lanes.Ticket(key: .only, number: number)
    }
}

extension PersistenceSlot.Action {
    fileprivate init(_ waiter: UnsafeContinuation<Void, Never>?) {
        self = waiter.map { .resume($0) } ?? .none
    }
}
