import Testing

@testable import UserSessions

struct FIFOLanesTests {
    typealias Lanes = FIFOLanes<String, String>

    @Test func ticketsOfOneLaneRunOneAtATimeInCallOrder() {
        var lanes = Lanes()
        let first = lanes.enter("alice")
        let second = lanes.enter("alice")
        let third = lanes.enter("alice")
        #expect(first.runsNow)
        #expect(!second.runsNow)
        #expect(!third.runsNow)
        #expect(lanes.park("third", for: third.ticket) == nil)
        #expect(lanes.park("second", for: second.ticket) == nil)
        #expect(lanes.isRunning(first.ticket))
        #expect(lanes.leave(first.ticket) == "second")
        #expect(lanes.isRunning(second.ticket))
        #expect(lanes.leave(second.ticket) == "third")
        #expect(lanes.leave(third.ticket) == nil)
        #expect(!lanes.isBusy("alice"))
    }

    @Test func aTicketParkingAtTheHeadGetsItsWaiterBackAtOnce() {
        var lanes = Lanes()
        let first = lanes.enter("alice")
        #expect(lanes.park("first", for: first.ticket) == "first")
        #expect(lanes.isRunning(first.ticket))
    }

    @Test func aTicketWhoseTurnCameBeforeItParkedRunsWhenItParks() {
        var lanes = Lanes()
        let first = lanes.enter("alice")
        let second = lanes.enter("alice")
        let third = lanes.enter("alice")
        #expect(lanes.park("third", for: third.ticket) == nil)
        // The second has not parked yet: nobody is resumed, and the turn waits for it.
        #expect(lanes.leave(first.ticket) == nil)
        #expect(!lanes.isRunning(second.ticket))
        #expect(lanes.count("alice") == 2)
        #expect(lanes.park("second", for: second.ticket) == "second")
        #expect(lanes.isRunning(second.ticket))
        #expect(lanes.leave(second.ticket) == "third")
    }

    @Test func lanesOfDifferentKeysAreIndependent() {
        var lanes = Lanes()
        let alice = lanes.enter("alice")
        let bob = lanes.enter("bob")
        let carol = lanes.enter("carol")
        let aliceAgain = lanes.enter("alice")
        let bobAgain = lanes.enter("bob")
        #expect(alice.runsNow && bob.runsNow && carol.runsNow)
        #expect(!aliceAgain.runsNow && !bobAgain.runsNow)
        #expect(lanes.park("bob 2", for: bobAgain.ticket) == nil)
        #expect(lanes.park("alice 2", for: aliceAgain.ticket) == nil)
        #expect(lanes.leave(bob.ticket) == "bob 2")
        #expect(lanes.count("alice") == 2)
        #expect(lanes.leave(carol.ticket) == nil)
        #expect(!lanes.isBusy("carol"))
        #expect(lanes.leave(alice.ticket) == "alice 2")
        #expect(lanes.leave(aliceAgain.ticket) == nil)
        #expect(lanes.isBusy("bob"))
        #expect(lanes.leave(bobAgain.ticket) == nil)
        for key in ["alice", "bob", "carol"] { #expect(!lanes.isBusy(key)) }
    }

    @Test func countsAndBusynessFollowTheTicketsOfEachKey() {
        var lanes = Lanes()
        #expect(lanes.count("alice") == 0)
        #expect(!lanes.isBusy("alice"))
        let first = lanes.enter("alice")
        let second = lanes.enter("alice")
        _ = lanes.enter("bob")
        #expect(lanes.count("alice") == 2)
        #expect(lanes.count("bob") == 1)
        #expect(lanes.count("carol") == 0)
        _ = lanes.leave(first.ticket)
        #expect(lanes.count("alice") == 1)
        #expect(lanes.park("second", for: second.ticket) == "second")
        #expect(lanes.count("alice") == 1)
        _ = lanes.leave(second.ticket)
        #expect(lanes.count("alice") == 0)
        #expect(!lanes.isBusy("alice"))
        #expect(lanes.isBusy("bob"))
    }

    @Test func aLaneRemovedWhenEmptyStartsAfreshForItsNextTicket() {
        var lanes = Lanes()
        let first = lanes.enter("alice")
        _ = lanes.enter("bob")
        _ = lanes.leave(first.ticket)
        #expect(!lanes.isBusy("alice"))
        // Another key is busy meanwhile, so the new lane lives elsewhere than the first one: it still runs at once.
        let again = lanes.enter("alice")
        #expect(again.runsNow)
        #expect(again.ticket != first.ticket)
        #expect(lanes.park("again", for: again.ticket) == "again")
    }

    @Test func aNextTicketThatHadNotParkedWhenTheHolderLeftRunsWhenItParks() {
        var lanes = Lanes()
        let holder = lanes.enter("slot")
        let next = lanes.enter("slot")
        #expect(lanes.leave(holder.ticket) == nil)
        #expect(lanes.park("next", for: next.ticket) == "next")
    }

    @Test func aSingleLaneUserNeedsNoKey() {
        var lanes = FIFOLanes<SingleLane, Int>()
        let first = lanes.enter()
        let second = lanes.enter()
        #expect(first.runsNow && !second.runsNow)
        #expect(lanes.count == 2)
        #expect(lanes.park(2, for: second.ticket) == nil)
        #expect(lanes.leave(first.ticket) == 2)
        #expect(lanes.count == 1)
        #expect(lanes.leave(second.ticket) == nil)
        #expect(!lanes.isBusy)
    }

    @Test func manyWaitersOfManyKeysAreResumedInTheirLanesOrder() {
        var lanes = Lanes()
        let keys = ["a", "b", "c", "d"]
        var tickets: [String: [Lanes.Ticket]] = [:]
        for round in 0..<50 {
            for key in keys {
                let (ticket, runsNow) = lanes.enter(key)
                #expect(runsNow == (round == 0))
                if !runsNow { #expect(lanes.park("\(key)\(round)", for: ticket) == nil) }
                tickets[key, default: []].append(ticket)
            }
        }
        for round in 0..<50 {
            for key in keys {
                let resumed = lanes.leave(tickets[key, default: []][round])
                #expect(resumed == (round == 49 ? nil : "\(key)\(round + 1)"))
            }
        }
        for key in keys { #expect(!lanes.isBusy(key)) }
    }

    /// Random schedules of enters, parks and leaves over three keys, checked step by step against a model:
    /// a list of tickets per key in call order, of which only the first may run, and only once it knows.
    @Test(arguments: [UInt64(1), 2, 3, 4])
    func randomSchedulesFollowTheModel(seed: UInt64) {
        struct Operation {
            let key: Int
            let ticket: FIFOLanes<Int, Int>.Ticket
            var parked = false
            var runs = false
        }
        var random = SplitMix64(seed: seed)
        var lanes = FIFOLanes<Int, Int>()
        var operations: [Int: Operation] = [:]  // by id; removed when they leave
        var model: [Int: [Int]] = [:]  // per key, the ids in line (the first has the turn)
        var started: [Int: [Int]] = [:]  // per key, the ids in the order they ran
        var nextID = 0

        func run(_ id: Int) {
            operations[id]?.runs = true
            if let key = operations[id]?.key { started[key, default: []].append(id) }
        }
        // After the head of `key`'s line left: the next one runs if it is parked.
        func expectHandover(_ key: Int, resumed: Int?) {
            let next = model[key]?.first
            if let next, operations[next]?.parked == true {
                #expect(resumed == next)
                run(next)
            } else {
                #expect(resumed == nil)
            }
        }

        for _ in 0..<3_000 {
            let live = operations.keys.sorted()
            switch random.next() % 3 {
            case 0:
                let key = Int(random.next() % 3)
                let (ticket, runsNow) = lanes.enter(key)
                #expect(runsNow == (model[key]?.isEmpty ?? true))
                operations[nextID] = Operation(key: key, ticket: ticket)
                model[key, default: []].append(nextID)
                if runsNow { run(nextID) }
                nextID += 1
            case 1:
                let waiting = live.filter { operations[$0]?.parked == false && operations[$0]?.runs == false }
                guard let id = waiting.randomElement(using: &random), let operation = operations[id] else { continue }
                let back = lanes.park(id, for: operation.ticket)
                if model[operation.key]?.first == id {
                    #expect(back == id)
                    run(id)
                } else {
                    #expect(back == nil)
                    operations[id]?.parked = true
                }
            default:
                let running = live.filter { operations[$0]?.runs == true }
                guard let id = running.randomElement(using: &random), let operation = operations[id] else { continue }
                let resumed = lanes.leave(operation.ticket)
                operations[id] = nil
                #expect(model[operation.key]?.first == id)
                model[operation.key]?.removeFirst()
                expectHandover(operation.key, resumed: resumed)
            }
            for key in 0..<3 {
                let line = model[key] ?? []
                #expect(lanes.count(key) == line.count)
                #expect(lanes.isBusy(key) == !line.isEmpty)
                let running = line.filter { operations[$0]?.runs == true }
                #expect(running.count <= 1 && running.allSatisfy { $0 == line.first })
            }
            for operation in operations.values {
                #expect(lanes.isRunning(operation.ticket) == operation.runs)
            }
        }
        for order in started.values { #expect(order == order.sorted()) }
    }
}
