#if OpenIDConnect
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The test receiver reads what a peer sends, and turns garbage into typed errors instead of crashing or hanging.
struct LoopbackHTTPReceiverTests {
    /// Writes `bytes` into one end of a socket pair (closing it when `closeAfter`), and reads a request from the
    /// other end with a deadline of `timeout`.
    private func read(
        _ bytes: String, closeAfter: Bool = true, timeout: Duration = .seconds(5)
    ) throws -> Result<LoopbackHTTPReceiver.Request, LoopbackHTTPReceiverError> {
        var pair: [Int32] = [-1, -1]
        #if canImport(Darwin)
        let type = SOCK_STREAM
        #else
        let type = Int32(SOCK_STREAM.rawValue)
        #endif
        try #require(socketpair(AF_UNIX, type, 0, &pair) == 0)
        defer {
            close(pair[0])
            if !closeAfter { close(pair[1]) }
        }
        let data = Array(bytes.utf8)
        try #require(data.withUnsafeBytes { write(pair[1], $0.baseAddress, $0.count) } == data.count)
        if closeAfter { close(pair[1]) }
        do throws(LoopbackHTTPReceiverError) {
            return .success(try LoopbackHTTPReceiver.readRequest(pair[0], deadline: .now + timeout))
        } catch {
            return .failure(error)
        }
    }

    @Test func aRequestWithAContentLengthBodyIsRead() throws {
        let request = try read("POST /logout HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello").get()
        #expect(request.method == "POST" && request.path == "/logout" && request.body == Data("hello".utf8))
    }

    @Test func garbageIsATypedError() throws {
        #expect(throws: LoopbackHTTPReceiverError.malformed("bad request line")) {
            try read("\u{1}\u{2} garbage\r\n\r\n").get()
        }
        #expect(throws: LoopbackHTTPReceiverError.malformed("bad Content-Length")) {
            try read("POST / HTTP/1.1\r\nContent-Length: -3\r\n\r\n").get()
        }
    }

    @Test func aBodyShorterThanItsContentLengthIsClosedEarly() throws {
        #expect(throws: LoopbackHTTPReceiverError.closedEarly) {
            try read("POST / HTTP/1.1\r\nContent-Length: 50\r\n\r\nshort").get()
        }
    }

    @Test func anOversizedRequestIsRefusedBeforeItIsRead() throws {
        #expect(throws: LoopbackHTTPReceiverError.tooLarge) {
            try read("POST / HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n").get()
        }
    }

    @Test func aPeerThatStopsSendingMeetsTheDeadline() throws {
        #expect(throws: LoopbackHTTPReceiverError.timedOut) {
            try read("POST / HTTP/1.1\r\n", closeAfter: false, timeout: .milliseconds(50)).get()
        }
    }
}
#endif
