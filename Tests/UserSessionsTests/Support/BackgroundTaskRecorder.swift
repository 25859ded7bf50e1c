@testable import UserSessions

/// Records the latest background task (a refresh or a write retry) a gate started, so a test can await it.
final class BackgroundTaskRecorder: BackgroundWorkProbe {
    private let latest = Locked<Task<Void, Never>?>(nil)

    func backgroundTaskStarted(_ task: Task<Void, Never>) {
        latest.withLock { $0 = task }
    }

    /// The latest task started, or `nil` when none was.
    var last: Task<Void, Never>? { latest.withLock { $0 } }
}

extension CredentialsGate {
    /// The gate's recorder of background tasks, installed at the first use: use it before the work to be awaited
    /// starts.
    var backgroundTasks: BackgroundTaskRecorder {
        backgroundWork.withLock { work in
            if let recorder = work.probe as? BackgroundTaskRecorder { return recorder }
            let recorder = BackgroundTaskRecorder()
            work.probe = recorder
            return recorder
        }
    }
}
