@testable import UserSessions

/// Records the background tasks (refreshes, write retries) a gate started, so a test can await them.
///
/// A task starts running before the gate records it: its work (a refresher call) can be seen before the record is.
/// A test that saw the work start waits for the record with ``last(afterStarting:)``.
final class BackgroundTaskRecorder: BackgroundWorkProbe {
    private let latest = Locked<Task<Void, Never>?>(nil)
    /// One arrival per recorded task, counted after it became ``last``.
    private let recorded = ArrivalCounter()
    /// Where the next commit waits once its write landed, before it publishes (see ``holdNextCommit(until:)``).
    private let commitHold = NextPassHold()
    /// One arrival per commit held by ``holdNextCommit(until:)``.
    var heldCommits: ArrivalCounter { commitHold.held }

    func backgroundTaskStarted(_ task: Task<Void, Never>) {
        latest.withLock { $0 = task }
        recorded.arrive()
    }

    func commitLanded() async {
        await commitHold.pass()
    }

    /// Holds the next commit of the gate between its write's landing and its publication until `gate` opens.
    func holdNextCommit(until gate: AsyncGate) {
        commitHold.hold(until: gate)
    }

    /// The latest task started, or `nil` when none was.
    var last: Task<Void, Never>? { latest.withLock { $0 } }

    /// The latest task, once at least `count` tasks were recorded.
    func last(afterStarting count: Int) async -> Task<Void, Never> {
        await recorded.wait(for: count)
        guard let task = last else { preconditionFailure("a task is recorded before it is counted") }
        return task
    }
}

extension CredentialsGate {
    /// The gate's recorder of background tasks, installed at the first use: use it before the work to be awaited
    /// starts.
    var backgroundTasks: BackgroundTaskRecorder {
        links.withLock { links in
            links.modifyWork { work in
                if let recorder = work.probe as? BackgroundTaskRecorder { return recorder }
                let recorder = BackgroundTaskRecorder()
                work.probe = recorder
                return recorder
            }
        }
    }
}
