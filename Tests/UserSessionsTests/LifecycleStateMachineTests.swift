import Testing

@testable import UserSessions

struct LifecycleStateMachineTests {
    typealias Machine = LifecycleStateMachine<String>

    @Test func callsRunOneAtATimeInTicketOrder() {
        var machine = Machine()
        guard case .proceed(let first) = machine.enter(.open).action,
            case .wait(let second) = machine.enter(.close).action,
            case .wait(let third) = machine.enter(.open).action
        else {
            Issue.record("unexpected entry actions")
            return
        }
        #expect(machine.park("third", ticket: third) == nil)
        #expect(machine.park("second", ticket: second) == nil)
        #expect(machine.waiterCount == 2)
        #expect(machine.leave(first) == "second")
        #expect(machine.leave(second) == "third")
        #expect(machine.leave(third) == nil)
        guard case .proceed = machine.enter(.close).action else {
            Issue.record("an idle turnstile must let the next call proceed")
            return
        }
    }

    @Test func aCallWhoseTurnCameBeforeItParkedRunsAtOnce() {
        var machine = Machine()
        guard case .proceed(let first) = machine.enter(.open).action,
            case .wait(let second) = machine.enter(.open).action
        else {
            Issue.record("unexpected entry actions")
            return
        }
        #expect(machine.leave(first) == nil)
        #expect(machine.park("second", ticket: second) == "second")
    }

    @Test func aCloseDuringAnOpenRequestsRollBackOnce() {
        var machine = Machine()
        guard case .proceed = machine.enter(.open).action else { return }
        machine.beginOpening()
        #expect(machine.openingVerdict == .proceed)

        let close = machine.enter(.close)
        #expect(close.cancelStarting)
        #expect(machine.openingVerdict == .rollBack)
        #expect(machine.enter(.close).cancelStarting == false)
    }

    @Test func aCloseWhileNoOpenIsRunningDoesNotCancelAnything() {
        var machine = Machine()
        guard case .proceed(let ticket) = machine.enter(.open).action else { return }
        _ = machine.beginOpening()
        machine.openingActivated()
        machine.opened()
        _ = machine.leave(ticket)
        #expect(machine.enter(.close).cancelStarting == false)
    }

    @Test func shutdownRejectsLaterOpensButNotCloses() {
        var machine = Machine()
        _ = machine.enter(.shutdown)
        #expect(machine.isShutDown)
        #expect(machine.enter(.open).action == .rejectShutDown)
        guard case .wait = machine.enter(.close).action else {
            Issue.record("a close after shutdown waits for the shutdown")
            return
        }
    }

    @Test func invalidationOfTheOpeningGenerationIsFoldedIntoTheOpen() {
        var machine = Machine()
        guard case .proceed = machine.enter(.open).action else { return }
        let generation = machine.beginOpening()
        machine.openingActivated()

        let entry = machine.enter(.invalidate(generation: generation, reason: .credentialsRevoked))
        #expect(entry.action == .dropped)
        #expect(entry.cancelStarting)
        #expect(machine.openingVerdict == .invalidate(.credentialsRevoked))
        #expect(machine.enter(.invalidate(generation: generation, reason: .credentialsRevoked)).cancelStarting == false)
    }

    @Test func invalidationsOfStaleOrEndingGenerationsAreDropped() {
        var machine = Machine()
        guard case .proceed(let ticket) = machine.enter(.open).action else { return }
        _ = machine.beginOpening()
        _ = machine.leave(ticket)
        guard case .proceed(let reopening) = machine.enter(.open).action else { return }
        let generation = machine.beginOpening()
        machine.openingActivated()
        machine.opened()
        _ = machine.leave(reopening)

        #expect(machine.enter(.invalidate(generation: generation - 1, reason: .credentialsRevoked)).action == .dropped)

        guard case .proceed(let closing) = machine.enter(.close).action else { return }
        machine.beginEnding()
        #expect(machine.enter(.invalidate(generation: generation, reason: .credentialsRevoked)).action == .dropped)
        machine.endActivity()
        _ = machine.leave(closing)
        #expect(machine.enter(.invalidate(generation: generation, reason: .credentialsRevoked)).action == .dropped)
    }

    @Test func invalidationOfTheOpenedGenerationTakesATurn() {
        var machine = Machine()
        guard case .proceed(let ticket) = machine.enter(.open).action else { return }
        let generation = machine.beginOpening()
        machine.openingActivated()
        machine.opened()
        _ = machine.leave(ticket)
        guard case .proceed = machine.enter(.invalidate(generation: generation, reason: .credentialsExpired)).action
        else {
            Issue.record("expected the invalidation to run")
            return
        }
    }
}
