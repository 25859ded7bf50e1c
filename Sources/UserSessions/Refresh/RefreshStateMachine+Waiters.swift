extension RefreshStateMachine {
    /// One caller waiting for the refresh in flight. A cancelled waiter stays as a tombstone
    /// (`continuation == nil`) until the refresh completes, so ids stay sorted for binary search.
    struct Waiter {
        let id: UInt64
        var continuation: WaiterContinuation?
    }

    /// What a waiter is resumed with. `accessToken()` needs only the token: its continuation carries a `String`,
    /// which keeps the waiting task's async frames small (a parked caller costs no extra task-allocator slab) and
    /// makes resuming it one retain instead of a copy of the whole credentials.
    enum WaiterContinuation {
        case token(UnsafeContinuation<String, any Error>)
        case credentials(UnsafeContinuation<Credentials, any Error>)

        func resume(throwing error: any Error) {
            switch self {
            case .token(let continuation): continuation.resumeVisibly(throwing: error)
            case .credentials(let continuation): continuation.resumeVisibly(throwing: error)
            }
        }

        /// Resumes with `credentials`, or only their access token (`token`, the same value, copied once by the
        /// caller for all waiters).
        func resume(returning credentials: Credentials, token: String) {
            switch self {
            case .token(let continuation): continuation.resumeVisibly(returning: token)
            case .credentials(let continuation): continuation.resumeVisibly(returning: credentials)
            }
        }
    }

    /// Adds a waiter for the flight in progress (see ``FlightMachine/register(waiterID:continuation:)``).
    mutating func register(waiterID: UInt64, continuation: WaiterContinuation) {
        flights.register(waiterID: waiterID, continuation: continuation)
    }

    /// A waiter's task was cancelled: returns its continuation (to resume with `CancellationError`) if it is
    /// still waiting.
    mutating func cancelWaiter(id: UInt64) -> WaiterContinuation? {
        flights.cancelWaiter(id: id)
    }
}
