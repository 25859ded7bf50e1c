@testable import UserSessions

/// Records the background tasks (refreshes, write retries) a gate started, so a test can await them.
///
/// A task starts running before the gate records it: its work (a refresher call) can be seen before the record is.
/// A test that saw the work start waits for the record with ``last(afterStarting:)``.
final class BackgroundTaskRecorder: BackgroundWorkProbe {
    private struct State {
        var latest: Task<Void, Never>?
        var started = 0
        var waiters: [(count: Int, continuation: CheckedContinuation<Task<Void, Never>, Never>)] = []
    }
    private let state = Locked(State())

    func backgroundTaskStarted(_ task: Task<Void, Never>) {
        let ready = state.withLock { state -> [CheckedContinuation<Task<Void, Never>, Never>] in
            state.latest = task
            state.started += 1
            let started = state.started
            let ready = state.waiters.filter { $0.count <= started }.map(\.continuation)
            state.waiters.removeAll { $0.count <= started }
            return ready
        }
        for continuation in ready { continuation.resumeVisibly(returning: task) }
    }

    /// The latest task started, or `nil` when none was.
    var last: Task<Void, Never>? { state.withLock { $0.latest } }

    /// The latest task, once at least `count` tasks were recorded.
    func last(afterStarting count: Int) async -> Task<Void, Never> {
        await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Task<Void, Never>, Never>) in
            let ready = state.withLock { state -> Task<Void, Never>? in
                if state.started >= count, let latest = state.latest { return latest }
                state.waiters.append((count, continuation))
                return nil
            }
            if let ready { continuation.resumeVisibly(returning: ready) }
        }
    }
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
