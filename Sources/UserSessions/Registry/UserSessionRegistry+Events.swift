extension UserSessionRegistry {
    /// One event of one of the registry's controllers.
    public struct Event: Sendable, Hashable, CustomStringConvertible {
        /// The identifier of the controller's user.
        public let identifier: String
        /// The event, as the controller's own ``UserSessionController/events(bufferSize:)`` delivers it.
        public let event: UserSessionEvent

        /// Creates an event.
        public init(identifier: String, event: UserSessionEvent) {
            self.identifier = identifier
            self.event = event
        }

        public var description: String { "UserSessionRegistry.Event(\(identifier): \(event))" }
    }

    /// A new subscription to the events of every controller the registry holds, each with its identifier.
    ///
    /// - For each controller, the first element is ``UserSessionEvent/Kind/current`` with its session (controllers
    ///   held when you subscribe come first, in identifier order, as far as their state is known; a controller
    ///   made later starts with its own `.current` when it is made); then every event of that controller follows
    ///   in the order it was emitted. Events of different controllers interleave in no promised order.
    /// - Each subscription buffers at most `bufferSize` (default
    ///   ``UserSessionController/Configuration/eventBufferSize``) unread elements, dropping the oldest: a
    ///   subscriber that stops reading never blocks a controller or another subscriber, and its last element is
    ///   always the latest event. Stop iterating (or cancel the iterating task) to end the subscription.
    /// - A controller leaving the registry (closed, evicted or invalidated) delivers its last events, such as
    ///   `.closed(.shutdown)` for an evicted open session, and then nothing more.
    /// - ``shutdown()`` finishes every stream, after the last events of every controller; subscribing after it
    ///   gives a stream that is already finished.
    ///
    /// While nobody is subscribed the registry does no work for this; each subscribed-to controller costs one
    /// forwarding task.
    public func events(bufferSize: Int? = nil) -> AsyncStream<Event> {
        relay.subscribe(bufferSize: bufferSize ?? configuration.eventBufferSize) {
            state.withLock { state in
                state.entries.map {
                    .init(entryID: $0.value.id, identifier: $0.key.value, controller: $0.value.controller)
                }
            }
        }
    }
}
