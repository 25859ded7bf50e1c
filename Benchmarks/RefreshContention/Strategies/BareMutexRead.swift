import Synchronization

/// The floor: a `Mutex`-protected read and nothing else (no expiry check, no refresh).
final class BareMutexRead: TokenSource {
    private let current: Mutex<String>

    init(token: String) {
        current = Mutex(token)
    }

    nonisolated(nonsending) func token() async throws -> String {
        current.withLock { $0 }
    }
}
