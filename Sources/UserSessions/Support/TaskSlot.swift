/// A place for at most one background task (a timer, a subscription): putting a task in, or clearing it, cancels
/// the one it held, outside the lock.
struct TaskSlot: ~Copyable, Sendable {
    private let task = Locked<Task<Void, Never>?>(nil)

    /// Holds `task` (or nothing) from now on and cancels the task held before.
    func replace(with task: Task<Void, Never>?) {
        let previous = self.task.withLock { current in
            defer { current = task }
            return current
        }
        previous?.cancel()
    }
}
