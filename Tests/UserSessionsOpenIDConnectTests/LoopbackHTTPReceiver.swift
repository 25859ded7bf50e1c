#if OpenIDConnect
import Foundation
import UserSessions
import UserSessionsTestSupport

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Why the receiver could not start or read a request.
enum LoopbackHTTPReceiverError: Error, Equatable, CustomStringConvertible {
    /// A socket call failed with `errno`.
    case socket(String, Int32)
    /// The request did not arrive complete before the deadline.
    case timedOut
    /// The peer closed the connection before the request was complete.
    case closedEarly
    /// The request line or headers are not HTTP/1.1 as the receiver reads it.
    case malformed(String)
    /// The head or the body is larger than the receiver accepts.
    case tooLarge

    var description: String {
        switch self {
        case .socket(let call, let code): "\(call) failed (errno \(code))"
        case .timedOut: "the request did not arrive before the deadline"
        case .closedEarly: "the connection closed before the request was complete"
        case .malformed(let why): "malformed request: \(why)"
        case .tooLarge: "the request is too large"
        }
    }
}

/// A tiny HTTP/1.1 server on 127.0.0.1 (ephemeral port) for a test that must receive a request, such as the
/// provider's back-channel logout POST.
///
/// A dedicated thread accepts connections one at a time and reads one request from each (a `Content-Length` body,
/// at most ``maximumBytes`` in all, within ``readTimeout``); `handler` gets its method, path and body and returns the
/// status written back, with `Connection: close`. A request that cannot be read is answered 400 and recorded in
/// ``failures``; it never reaches `handler`. ``stop()`` closes the listening socket and waits for the thread.
final class LoopbackHTTPReceiver: Sendable {
    /// One request as `handler` sees it.
    struct Request: Sendable {
        var method: String
        var path: String
        var body: Data
    }

    /// The largest request (head and body) read.
    static let maximumBytes = 64 * 1024
    /// How long one request may take to arrive.
    static let readTimeout: Duration = .seconds(5)

    /// The port the receiver listens on.
    let port: Int
    private let listener: Int32
    private let state = Locked(State())
    private let handler: @Sendable (Request) async -> Int

    private struct State {
        var stopping = false
        var finished = false
        var waiter: CheckedContinuation<Void, Never>?
        var failures: [LoopbackHTTPReceiverError] = []
    }

    /// `http://127.0.0.1:<port><path>`.
    func url(_ path: String) -> URL {
        URL(string: "http://127.0.0.1:\(port)\(path)") ?? URL(fileURLWithPath: "/")
    }

    /// The requests that could not be read, in order.
    var failures: [LoopbackHTTPReceiverError] { state.withLock { $0.failures } }

    private init(listener: Int32, port: Int, handler: @escaping @Sendable (Request) async -> Int) {
        self.listener = listener
        self.port = port
        self.handler = handler
    }

    /// Listens on 127.0.0.1 with an ephemeral port and starts accepting.
    static func start(_ handler: @escaping @Sendable (Request) async -> Int) throws -> LoopbackHTTPReceiver {
        let listener: Int32
        let port: Int
        do {
            (listener, port) = try LoopbackSocket.bound(listening: true)
        } catch {
            throw LoopbackHTTPReceiverError.socket(error.step, error.code)
        }
        let receiver = LoopbackHTTPReceiver(listener: listener, port: port, handler: handler)
        Thread { receiver.acceptLoop() }.start()
        return receiver
    }

    /// Starts a receiver, runs `body` with it, and stops it whether `body` returns or throws.
    static func run<R>(
        _ handler: @escaping @Sendable (Request) async -> Int, _ body: (LoopbackHTTPReceiver) async throws -> R
    ) async throws -> R {
        let receiver = try start(handler)
        do {
            let result = try await body(receiver)
            await receiver.stop()
            return result
        } catch {
            await receiver.stop()
            throw error
        }
    }

    /// Stops accepting (a request being handled is finished first), waits for the accepting thread, and closes the
    /// listening socket.
    func stop() async {
        let alreadyStopping = state.withLock { state -> Bool in
            defer { state.stopping = true }
            return state.stopping
        }
        guard !alreadyStopping else { return }
        shutdown(listener, Int32(SHUT_RDWR))  // wakes the blocked accept
        await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let finished = state.withLock { state -> Bool in
                if !state.finished { state.waiter = continuation }
                return state.finished
            }
            if finished { continuation.resumeVisibly() }
        }
        close(listener)
    }

    private func acceptLoop() {
        while !state.withLock({ $0.stopping }) {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                break
            }
            serve(connection)
            close(connection)
        }
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resumeVisibly()
    }

    /// Reads one request from `connection`, runs the handler (waiting for it on this thread, never on the pool) and
    /// writes its status.
    private func serve(_ connection: Int32) {
        let status: Int
        do throws(LoopbackHTTPReceiverError) {
            let request = try Self.readRequest(connection, deadline: .now + Self.readTimeout)
            let answer = Locked<Int>(500)
            let done = DispatchSemaphore(value: 0)
            let handler = self.handler
            Task {
                let status = await handler(request)
                answer.withLock { $0 = status }
                done.signal()
            }
            done.wait()
            status = answer.withLock { $0 }
        } catch {
            state.withLock { $0.failures.append(error) }
            status = 400
        }
        let reason = status < 300 ? "OK" : "Error"
        let response = Array("HTTP/1.1 \(status) \(reason)\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)
        response.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let sent = send(connection, bytes.baseAddress?.advanced(by: offset), bytes.count - offset, sendFlags)
                if sent < 0, errno == EINTR { continue }
                if sent <= 0 { return }
                offset += sent
            }
        }
    }

    /// Reads a request head and its `Content-Length` body before `deadline`.
    static func readRequest(
        _ connection: Int32, deadline: ContinuousClock.Instant
    ) throws(LoopbackHTTPReceiverError) -> Request {
        var buffer: [UInt8] = []
        var head: (method: String, path: String, contentLength: Int, bodyStart: Int)?
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            if head == nil, let end = buffer.firstRange(of: Array("\r\n\r\n".utf8)) {
                head = try parseHead(buffer[..<end.lowerBound], bodyStart: end.upperBound)
            }
            if let head {
                guard head.bodyStart + head.contentLength <= maximumBytes else { throw .tooLarge }
                if buffer.count >= head.bodyStart + head.contentLength {
                    let body = Data(buffer[head.bodyStart..<(head.bodyStart + head.contentLength)])
                    return Request(method: head.method, path: head.path, body: body)
                }
            }
            guard buffer.count < maximumBytes else { throw .tooLarge }
            let remaining = ContinuousClock.now.duration(to: deadline)
            guard remaining > .zero else { throw .timedOut }
            var poller = pollfd(fd: connection, events: Int16(POLLIN), revents: 0)
            let (seconds, attoseconds) = remaining.components
            let milliseconds = Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
            let ready = poll(&poller, 1, milliseconds)
            if ready == 0 || (ready < 0 && errno == EINTR) { continue }  // the deadline is checked above
            guard ready > 0 else { throw .socket("poll", errno) }
            let count = chunk.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { throw count == 0 ? .closedEarly : .socket("recv", errno) }
            buffer.append(contentsOf: chunk[..<count])
        }
    }

    private static func parseHead(
        _ bytes: ArraySlice<UInt8>, bodyStart: Int
    ) throws(LoopbackHTTPReceiverError) -> (method: String, path: String, contentLength: Int, bodyStart: Int) {
        guard let text = String(bytes: bytes, encoding: .utf8) else { throw .malformed("the head is not UTF-8") }
        let lines = text.split(separator: "\r\n", omittingEmptySubsequences: false)
        let requestLine = lines.first?.split(separator: " ", omittingEmptySubsequences: false) ?? []
        guard requestLine.count == 3, requestLine[2] == "HTTP/1.1" || requestLine[2] == "HTTP/1.0",
            !requestLine[0].isEmpty, requestLine[1].hasPrefix("/")
        else { throw .malformed("bad request line") }
        var contentLength = 0
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { throw .malformed("a header without a colon") }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            if name == "content-length" {
                guard let length = Int(value), length >= 0 else { throw .malformed("bad Content-Length") }
                contentLength = length
            } else if name == "transfer-encoding" {
                throw .malformed("Transfer-Encoding is not supported")
            }
        }
        return (String(requestLine[0]), String(requestLine[1]), contentLength, bodyStart)
    }
}

#if canImport(Darwin)
private let sendFlags: Int32 = 0
#else
private let sendFlags = Int32(MSG_NOSIGNAL)
#endif
#endif
