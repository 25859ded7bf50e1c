extension CredentialsGate {
    // MARK: - Background work

    /// The unstructured tasks running refreshes and write retries, so a close can cancel them when the store
    /// overruns its deadline.
    struct BackgroundWork {
        var nextID: UInt64 = 0
        var running: [UInt64: Task<Void, Never>] = [:]
        /// Tasks that finished before they were recorded (a task may finish before `Task {}` returns).
        var finishedEarly: Set<UInt64> = []
    }

    /// Runs `body` in an unstructured task that no caller's cancellation reaches, recorded until it finishes.
    @discardableResult
    func runInBackground(_ body: @escaping @Sendable () async -> Void) -> Task<Void, Never> {
        let id = backgroundWork.withLock { work -> UInt64 in
            work.nextID += 1
            return work.nextID
        }
        let task = Task {
            await body()
            self.backgroundWork.withLock { work in
                if work.running.removeValue(forKey: id) == nil { work.finishedEarly.insert(id) }
            }
        }
        backgroundWork.withLock { work in
            if work.finishedEarly.remove(id) == nil { work.running[id] = task }
        }
        lastBackgroundTask.withLock { $0 = task }
        return task
    }

    func cancelBackgroundWork() {
        let tasks = backgroundWork.withLock { Array($0.running.values) }
        for task in tasks { task.cancel() }
    }
}
