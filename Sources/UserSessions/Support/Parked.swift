/// A caller suspended in one of the package's waiting places until the owner of that place hands it an outcome.
///
/// The package suspends callers in these places: a lane's turn (``FIFOLanes``: the registry's per-user lanes, a
/// controller's turnstile), a single flight (``SingleFlight``: the registry's get-or-restore, the ledger's refreshes,
/// the client-credentials tokens), the ledger's write turn, a subscription's next event, a session's next token, a
/// deadline's race, and the bridges from callbacks (the file store's and `BlockingIO`'s dispatch queues, the
/// URLSession transport, the PostgreSQL change hub's listener). Each keeps its callers as values of this type inside
/// its own lock, and resumes them after releasing it.
///
/// The continuation is private, so a parked caller is resumed only through this type, and every resumption is a
/// hand-over ThreadSanitizer sees (``Handoff``): the guarantee follows from the type, not from a convention each
/// place must keep. As with `UnsafeContinuation`, a parked caller must be resumed exactly once: every place takes it
/// out of its slot under its lock before resuming it, so only one path ever gets it.
///
/// Parking and deciding are one step: ``wait(isolation:_:)`` hands the new parked caller to the owner's `park`
/// closure before the task suspends. The closure keeps it (returns `nil`) or answers at once (returns the outcome),
/// and an answer is given only after the closure returned, that is after any lock it took.
package struct Parked<Success: Sendable, Failure: Error>: Sendable {
    private let continuation: UnsafeContinuation<Success, Failure>

    private init(_ continuation: UnsafeContinuation<Success, Failure>) {
        self.continuation = continuation
    }

    /// Resumes the caller with `value`.
    package func resume(returning value: Success) {
        continuation.resumeVisibly(returning: value)
    }

    /// Resumes the caller by throwing `error`.
    package func resume(throwing error: Failure) {
        continuation.resumeVisibly(throwing: error)
    }

    /// Resumes the caller with `result`.
    package func resume(with result: Result<Success, Failure>) {
        continuation.resumeVisibly(with: result)
    }
}

extension Parked where Success == Void {
    /// Resumes the caller.
    package func resume() {
        continuation.resumeVisibly()
    }
}

extension Parked where Failure == Never {
    /// Parks the calling task. `park` runs at once, before the task suspends: it keeps the parked caller to resume
    /// later and returns `nil`, or returns the value the caller goes on with now.
    package static func wait(
        isolation: isolated (any Actor)? = #isolation, _ park: (Parked) -> Success?
    ) async -> Success {
        await withVisibleUnsafeContinuation(isolation: isolation) {
            (continuation: UnsafeContinuation<Success, Never>) in
            let parked = Parked(continuation)
            if let answer = park(parked) { parked.resume(returning: answer) }
        }
    }
}

extension Parked where Success == Void, Failure == Never {
    /// Parks the calling task until its turn. `park` runs at once, before the task suspends: it keeps the parked
    /// caller (returns `nil`), or hands it back when the turn has come to it already, and the caller goes on at once.
    package static func wait(
        isolation: isolated (any Actor)? = #isolation, handingBack park: (Parked) -> Parked?
    ) async {
        await wait(isolation: isolation) { park($0) == nil ? nil : () }
    }
}

extension Parked where Failure == any Error {
    /// Parks the calling task. `park` runs at once, before the task suspends: it keeps the parked caller to resume
    /// later and returns `nil`, or returns the outcome the caller goes on with now.
    package static func wait(
        isolation: isolated (any Actor)? = #isolation, _ park: (Parked) -> Result<Success, any Error>?
    ) async throws -> Success {
        try await withVisibleUnsafeThrowingContinuation(isolation: isolation) {
            (continuation: UnsafeContinuation<Success, any Error>) in
            let parked = Parked(continuation)
            if let answer = park(parked) { parked.resume(with: answer) }
        }
    }
}
