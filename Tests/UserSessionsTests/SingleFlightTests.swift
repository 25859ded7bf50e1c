import Testing

@testable import UserSessions

/// The one single-flight mechanism, synchronously: who leads, who joins, in which order waiters come back, and
/// what a waiter that leaves or a flight that lands does to the others.
struct SingleFlightTests {
    @Test func theFirstCallerLeadsAndLaterOnesJoinTheSameFlight() {
        var flights = SingleFlight<String, String>()
        let led = flights.lead("alice")
        #expect(led)
        let led2 = flights.lead("alice")
        #expect(!led2)
        let joined = flights.join("alice", id: 1, "first joiner")
        #expect(joined)
        #expect(flights.isRunning("alice"))
        #expect(flights.waiterCount == 1)
    }

    @Test func flightsOfDifferentKeysAreIndependent() {
        var flights = SingleFlight<String, String>()
        let led = flights.lead("alice")
        #expect(led)
        let led2 = flights.lead("bob")
        #expect(led2)
        let joined = flights.join("alice", id: 1, "a")
        #expect(joined)
        let joined2 = flights.join("bob", id: 2, "b")
        #expect(joined2)
        let landed = flights.land("alice").continuations
        #expect(landed == ["a"])
        #expect(!flights.isRunning("alice"))
        #expect(flights.isRunning("bob"))
        let landed2 = flights.land("bob").continuations
        #expect(landed2 == ["b"])
        #expect(flights.isEmpty)
    }

    @Test func joiningAFlightThatLandedFailsSoTheCallerAsksAgain() {
        var flights = SingleFlight<String, String>()
        let joined = flights.join("alice", id: 1, "late")
        #expect(!joined)
        let led = flights.lead("alice")
        #expect(led)
        let landed = flights.land("alice").continuations
        #expect(landed.isEmpty)
        let joined2 = flights.join("alice", id: 2, "later")
        #expect(!joined2)
        // The next caller leads a new flight.
        let led2 = flights.lead("alice")
        #expect(led2)
    }

    @Test func landingReturnsTheWaitersInIdOrderEvenWhenALaterIdArrivedFirst() {
        var flights = SingleFlight<Int, UInt64>()
        let led = flights.lead(7)
        #expect(led)
        for id: UInt64 in [1, 2, 5, 3, 4, 9, 6] {
            let joined = flights.join(7, id: id, id)
            #expect(joined)
        }
        let landed = flights.land(7).continuations
        #expect(landed == [1, 2, 3, 4, 5, 6, 9])
    }

    @Test func aWaiterThatLeavesIsHandedBackOnceAndNotResumedWithTheOutcome() {
        var flights = SingleFlight<String, String>()
        let led = flights.lead("alice")
        #expect(led)
        let joined = flights.join("alice", id: 1, "stays")
        #expect(joined)
        let joined2 = flights.join("alice", id: 2, "leaves")
        #expect(joined2)
        let joined3 = flights.join("alice", id: 3, "stays too")
        #expect(joined3)
        let left = flights.leave(id: 2)
        #expect(left == "leaves")
        let left2 = flights.leave(id: 2)
        #expect(left2 == nil)
        let left3 = flights.leave(id: 99)
        #expect(left3 == nil)
        #expect(flights.waiterCount == 2)
        let landed = flights.land("alice").continuations
        #expect(landed == ["stays", "stays too"])
    }

    @Test func flightWaitersKeepTombstonesSoLaterRemovalsStillFindTheirWaiter() {
        var waiters = FlightWaiters<String>()
        #expect(waiters.isEmpty)
        for id: UInt64 in [10, 20, 30, 40] {
            waiters.add(.init(id: id, continuation: "w\(id)"))
        }
        let removed = waiters.remove(id: 20)
        #expect(removed == "w20")
        let removed2 = waiters.remove(id: 40)
        #expect(removed2 == "w40")
        let removed3 = waiters.remove(id: 30)
        #expect(removed3 == "w30")
        let removed4 = waiters.remove(id: 25)
        #expect(removed4 == nil)
        #expect(waiters.all.map(\.id) == [10, 20, 30, 40])
        #expect(waiters.continuations == ["w10"])
        // A waiter arriving with an id lower than the tombstones is still placed in order.
        waiters.add(.init(id: 15, continuation: "w15"))
        #expect(waiters.continuations == ["w10", "w15"])
    }
}
