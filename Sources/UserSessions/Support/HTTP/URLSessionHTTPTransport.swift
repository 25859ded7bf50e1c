import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The default ``HTTPTransport``: `URLSession` (FoundationNetworking on Linux).
///
/// Each transport owns an ephemeral session: no cookies, no cache, no stored credentials. It refuses every
/// redirect (the 3xx comes back as the response), reads at most ``HTTPTransportRequest/maximumResponseBytes`` of a
/// body (a longer one is cancelled as soon as it goes past the limit, so a hostile server cannot make the process
/// buffer an unbounded answer), ends each request after ``HTTPTransportRequest/timeout`` and cancels it when the
/// calling task is cancelled. Requests never block a thread.
///
/// Copies share one session; it is invalidated when the last copy goes away. Share one transport between a
/// refresher and a store if you like; it is safe to use from any number of tasks at once.
///
/// **Connections per host.** `URLSession` opens at most ``maximumConnectionsPerHost`` connections to one host at a
/// time and queues every further request. Its own default, 6, suits a browser, not a server refreshing many users
/// against one identity provider: after a restart with 200 expired sessions, 200 refreshes go 6 at a time (the
/// benchmark's restart storm measures it). Pass a larger limit, or use the `AsyncHTTPClient` trait's transport, on
/// a server; keep the provider's own rate limits in mind.
public struct URLSessionHTTPTransport: HTTPTransport, Sendable {
    private let client: Client
    /// The most connections the session opens to one host at once; requests beyond it wait for a connection.
    public let maximumConnectionsPerHost: Int

    /// `URLSession`'s own default for ``maximumConnectionsPerHost``.
    public static let defaultMaximumConnectionsPerHost = 6

    /// Creates a transport with its own ephemeral `URLSession`.
    ///
    /// - Parameter maximumConnectionsPerHost: The most connections open to one host at once (at least 1; smaller
    ///   values count as 1). The default is `URLSession`'s, ``defaultMaximumConnectionsPerHost``.
    public init(maximumConnectionsPerHost: Int = URLSessionHTTPTransport.defaultMaximumConnectionsPerHost) {
        self.maximumConnectionsPerHost = max(1, maximumConnectionsPerHost)
        client = Client(maximumConnectionsPerHost: self.maximumConnectionsPerHost)
    }

    /// Sends `request` as described on ``HTTPTransport/send(_:)``.
    ///
    /// - Throws: ``HTTPTransportError/Code/responseTooLarge``; ``HTTPTransportError/Code/timedOut``;
    ///   `CancellationError` when the calling task is cancelled (the request is cancelled too); `URLError` for
    ///   other network failures.
    public func send(_ request: HTTPTransportRequest) async throws -> HTTPTransportResponse {
        try await client.send(request)
    }
}

extension URLSessionHTTPTransport {
    /// The session and its delegate; invalidates the session when released.
    final class Client: Sendable {
        // URLSession is documented as thread-safe; the delegate keeps its state in a `Locked`.
        private let session: URLSession
        private let delegate: Delegate

        init(maximumConnectionsPerHost: Int) {
            let configuration = URLSessionConfiguration.ephemeral
            configuration.httpMaximumConnectionsPerHost = maximumConnectionsPerHost
            configuration.httpCookieStorage = nil
            configuration.httpShouldSetCookies = false
            configuration.httpCookieAcceptPolicy = .never
            configuration.urlCache = nil
            configuration.urlCredentialStorage = nil
            configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
            delegate = Delegate()
            session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        }

        deinit {
            // A session retains its delegate until invalidated.
            session.finishTasksAndInvalidate()
        }

        func send(_ request: HTTPTransportRequest) async throws -> HTTPTransportResponse {
            try Task.checkCancellation()
            var urlRequest = URLRequest(url: request.url, timeoutInterval: max(0.001, request.timeout.seconds))
            urlRequest.httpMethod = request.method.rawValue
            for field in request.headers { urlRequest.addValue(field.value, forHTTPHeaderField: field.name) }
            urlRequest.httpBody = request.body
            let task = session.dataTask(with: urlRequest)
            let delegate = delegate
            do {
                return try await withTaskCancellationHandler {
                    try await Parked.wait {
                        (caller: Parked<HTTPTransportResponse, any Error>) -> Result<HTTPTransportResponse, any Error>?
                        in
                        delegate.register(task, caller, limit: max(0, request.maximumResponseBytes))
                        // The deadline covers the whole exchange; URLSession's own timeout is only an idle timeout.
                        let timer = Deadline.timer(after: request.timeout) { delegate.end(task, because: .timedOut) }
                        delegate.attach(timer, to: task)
                        // A cancellation that arrived before the registration found nothing to end.
                        if Task.isCancelled {
                            delegate.end(task, because: .cancelled)
                        } else {
                            task.resume()
                        }
                        return nil
                    }
                } onCancel: {
                    delegate.end(task, because: .cancelled)
                }
            } catch {
                if Task.isCancelled { throw CancellationError() }
                if let error = error as? URLError, error.code == .timedOut {
                    throw HTTPTransportError(.timedOut, "the request timed out")
                }
                throw error
            }
        }
    }

    /// Every exchange ends exactly once, whichever comes first: URLSession reports the task complete, or the
    /// deadline, the response limit or the caller's cancellation ends it. The last three resume the caller at once
    /// and then cancel the task, without waiting for URLSession to report it: a task cancelled while it was being
    /// started may never be reported complete, and the caller must not wait for that.
    final class Delegate: NSObject, URLSessionDataDelegate, Sendable {
        private struct Pending {
            var caller: Parked<HTTPTransportResponse, any Error>
            var limit: Int
            var body = Data()
            var timer: Task<Void, Never>?
        }

        /// Why an exchange ended before URLSession reported it complete.
        enum Ending {
            case timedOut
            case responseTooLarge
            case cancelled
        }

        private let pending = Locked<[Int: Pending]>([:])

        func register(
            _ task: URLSessionTask, _ caller: Parked<HTTPTransportResponse, any Error>, limit: Int
        ) {
            pending.withLock { $0[task.taskIdentifier] = Pending(caller: caller, limit: limit) }
        }

        func attach(_ timer: Task<Void, Never>, to task: URLSessionTask) {
            let finished = pending.withLock { pending -> Bool in
                guard var entry = pending[task.taskIdentifier] else { return true }
                entry.timer = timer
                pending[task.taskIdentifier] = entry
                return false
            }
            if finished { timer.cancel() }
        }

        /// Ends the exchange of `task` for `reason` if it has not ended yet: its caller gets the matching error now,
        /// its timer stops, and the task is cancelled (what URLSession reports for it later is ignored).
        func end(_ task: URLSessionTask, because reason: Ending) {
            guard let entry = pending.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
            entry.timer?.cancel()
            switch reason {
            case .timedOut:
                entry.caller.resume(throwing: HTTPTransportError(.timedOut, "the request timed out"))
            case .responseTooLarge:
                entry.caller.resume(
                    throwing: HTTPTransportError(
                        .responseTooLarge,
                        "the response body is larger than \(entry.limit) bytes (the rest was not read)"))
            case .cancelled:
                entry.caller.resume(throwing: CancellationError())
            }
            task.cancel()
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            let overflowed = pending.withLock { pending -> Bool in
                guard var entry = pending[dataTask.taskIdentifier] else { return false }
                if entry.body.count + data.count > entry.limit { return true }
                entry.body.append(data)
                pending[dataTask.taskIdentifier] = entry
                return false
            }
            if overflowed { end(dataTask, because: .responseTooLarge) }
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            guard let entry = pending.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
            entry.timer?.cancel()
            if let error {
                entry.caller.resume(throwing: error)
            } else if let response = task.response as? HTTPURLResponse {
                var headers = HTTPTransportHeaders()
                for (name, value) in response.allHeaderFields {
                    if let name = name as? String, let value = value as? String {
                        headers.add(name: name, value: value)
                    }
                }
                entry.caller.resume(
                    returning: HTTPTransportResponse(
                        statusCode: response.statusCode, headers: headers, body: entry.body))
            } else {
                entry.caller.resume(throwing: URLError(.badServerResponse))
            }
        }

        func urlSession(
            _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
            newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
        ) {
            completionHandler(nil)
        }
    }
}
