/// Who may write to the token store now: one writer at a time, the others queued in arrival order.
///
/// Writes are serialized so an older write can never land after a newer one, a clear is ordered against every
/// write, and `deactivate()` can wait for the write in progress. A pure state machine: one `mutating func` per
/// input, each returning what the gate must do once it has released its lock (resume the next writer).
/// ``CredentialsGate/withPersistSlot(_:)`` is its only user, so an acquisition is always paired with its release.
struct PersistenceSlot {
    /// The writers queued behind the holder, oldest first.
    typealias Queue = [(ticket: UInt64, continuation: UnsafeContinuation<Void, Never>)]

    private enum State {
        /// Nobody writes.
        case free
        /// `holder` writes; `queue` waits for it.
        case held(holder: UInt64, queue: Queue)
    }

    /// What the gate must do after an input.
    enum Action {
        case none
        /// Resume this writer: the slot is now its.
        case resume(UnsafeContinuation<Void, Never>)
    }

    private var state = State.free
    private var lastTicket: UInt64 = 0
    /// Holders whose slot ``abandon()`` took away: their write may still land, out of order.
    private var abandoned: Set<UInt64> = []

    /// Whether some writer holds the slot.
    var isHeld: Bool {
        if case .held = state { return true }
        return false
    }

    /// A new place in line.
    mutating func makeTicket() -> UInt64 {
        lastTicket += 1
        return lastTicket
    }

    /// `ticket` asks for the slot without waiting: `true` when it got it.
    mutating func tryAcquire(ticket: UInt64) -> Bool {
        guard case .free = state else { return false }
        state = .held(holder: ticket, queue: [])
        return true
    }

    /// `ticket` waits for the slot with `continuation`. Returns `.resume(continuation)` when the slot was freed in
    /// the meantime (the caller resumes it itself), `.none` when it was queued.
    mutating func enqueue(ticket: UInt64, continuation: UnsafeContinuation<Void, Never>) -> Action {
        switch state {
        case .free:
            state = .held(holder: ticket, queue: [])
            return .resume(continuation)
        case .held(let holder, var queue):
            state = .free  // drops the enum's reference, so the append does not copy the queue
            queue.append((ticket, continuation))
            state = .held(holder: holder, queue: queue)
            return .none
        }
    }

    /// `ticket` is done writing: the slot goes to the next writer in line. A holder whose slot was taken away by
    /// ``abandon()`` releases nothing.
    mutating func release(ticket: UInt64) -> Action {
        switch state {
        case .held(let holder, _) where holder == ticket:
            return handOver()
        case .held, .free:
            // Only a holder whose slot was taken away gets here; a ticket never handed out is a bug.
            guard ticket != 0, ticket <= lastTicket else {
                preconditionFailure("released a persistence slot ticket that was never handed out")
            }
            return .none
        }
    }

    /// Takes the slot away from a holder that overran the store timeout (its store ignores cancellation), so that
    /// later writes are not blocked for ever. When that write returns, ``finishWrite(ticket:)`` says so.
    mutating func abandon() -> Action {
        guard case .held(let holder, _) = state else { return .none }
        abandoned.insert(holder)
        return handOver()
    }

    /// The write of `ticket` returned: `true` when its slot had been taken away, so it may have landed out of
    /// order and must be repaired.
    mutating func finishWrite(ticket: UInt64) -> Bool {
        abandoned.remove(ticket) != nil
    }

    private mutating func handOver() -> Action {
        guard case .held(_, var queue) = state else { preconditionFailure("handing over a free persistence slot") }
        guard !queue.isEmpty else {
            state = .free
            return .none
        }
        state = .free
        let next = queue.removeFirst()
        state = .held(holder: next.ticket, queue: queue)
        return .resume(next.continuation)
    }
}
