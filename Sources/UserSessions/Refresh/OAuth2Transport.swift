import Foundation
import Synchronization

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The `URLSession` behind ``OAuth2TokenRefresher``: ephemeral (no cookies, no cache, no stored credentials),
/// with a request timeout, refusing every redirect so the refresh token and the client secret never leave for
/// another URL (a refused redirect arrives as its 3xx response, which the refresher treats as transient), and
/// reading at most `maximumResponseSize` bytes of a body: a longer one is cancelled as soon as it goes past the
/// limit, so a hostile endpoint cannot make the process buffer an unbounded answer.
final class OAuth2Transport: Sendable {
    // URLSession is documented as thread-safe; the delegate keeps its state in a Mutex.
    private let session: URLSession
    private let delegate: OAuth2TransportDelegate

    init(timeout: Double, maximumResponseSize: Int) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.urlCache = nil
        configuration.urlCredentialStorage = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        delegate = OAuth2TransportDelegate(maximumResponseSize: maximumResponseSize)
        session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    }

    deinit {
        // A session retains its delegate until invalidated.
        session.finishTasksAndInvalidate()
    }

    /// Sends `request` and returns the body and the HTTP response.
    ///
    /// - Throws: `CancellationError` or `URLError(.cancelled)` when the calling task is cancelled (the request is
    ///   cancelled too); `URLError` for network failures; ``UserSessionError/Code/malformedTokenResponse``
    ///   (transient) when the body is longer than the limit.
    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        try Task.checkCancellation()
        let task = session.dataTask(with: request)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                delegate.register(task.taskIdentifier, continuation)
                task.resume()
            }
        } onCancel: {
            task.cancel()
        }
    }
}

/// Collects each task's response and body (up to the limit), refuses redirects, and resumes the waiting `send`
/// when the task completes.
final class OAuth2TransportDelegate: NSObject, URLSessionDataDelegate, Sendable {
    private struct Pending {
        var continuation: CheckedContinuation<(Data, HTTPURLResponse), any Error>
        var body = Data()
        var isTooLarge = false
    }

    private let maximumResponseSize: Int
    private let pending = Mutex<[Int: Pending]>([:])

    init(maximumResponseSize: Int) {
        self.maximumResponseSize = maximumResponseSize
    }

    func register(_ taskIdentifier: Int, _ continuation: CheckedContinuation<(Data, HTTPURLResponse), any Error>) {
        pending.withLock { $0[taskIdentifier] = Pending(continuation: continuation) }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let limit = maximumResponseSize
        let overflowed = pending.withLock { pending -> Bool in
            guard var entry = pending[dataTask.taskIdentifier], !entry.isTooLarge else { return false }
            if entry.body.count + data.count > limit {
                entry.isTooLarge = true
                entry.body = Data()
            } else {
                entry.body.append(data)
            }
            pending[dataTask.taskIdentifier] = entry
            return entry.isTooLarge
        }
        if overflowed { dataTask.cancel() }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        guard let entry = pending.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
        if entry.isTooLarge {
            entry.continuation.resume(
                throwing: UserSessionError(
                    .malformedTokenResponse,
                    "the token response is larger than \(maximumResponseSize) bytes (the rest was not read)",
                    failureClass: .transient))
        } else if let error {
            entry.continuation.resume(throwing: error)
        } else if let response = task.response as? HTTPURLResponse {
            entry.continuation.resume(returning: (entry.body, response))
        } else {
            entry.continuation.resume(throwing: URLError(.badServerResponse))
        }
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}
