/// The one error type of the module.
///
/// Errors are compared by ``code`` only, so a new code is not a breaking change and tests can match on
/// `error.code == .serviceStartFailed`. Descriptions never contain access tokens, refresh tokens or client
/// secrets.
public struct UserSessionError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, as an extensible enum-like struct.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case invalidPrototype, malformedSignInResponse, invalidIdentifier
            case wrongState, sessionNotOpen, openRolledBack, shutdown
            case serviceStartFailed
            case noStoredSession, credentialsUnusable
            case storeCorrupt, storeFailure, unsupportedFormatVersion
            case remoteStoreRejected, transportFailure, insecureEndpoint
            case noRefresher, refreshFailed, refreshLoop, malformedTokenResponse
            case invalidConfiguration, minimumValidityUnreachable
            case revocationFailed, revisionConflict, refreshTokenRefused
            case tokenRequestFailed, clientRejected, invalidTokenRequest
            case dpopProofFailed, dpopDowngraded
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// A prototype was missing an identifier or otherwise unusable.
        public static let invalidPrototype = Code(.invalidPrototype)
        /// A sign-in response could not be parsed; ``UserSessionError/jsonPath`` names the field.
        public static let malformedSignInResponse = Code(.malformedSignInResponse)
        /// A session identifier was empty, too long or contained forbidden characters.
        public static let invalidIdentifier = Code(.invalidIdentifier)
        /// A call was made in a state that does not allow it (for example `restore()` while a session is open).
        public static let wrongState = Code(.wrongState)
        /// An operation needs an opened session and there is none.
        public static let sessionNotOpen = Code(.sessionNotOpen)
        /// `close()` arrived while `open(_:)` was starting services; the open was rolled back.
        public static let openRolledBack = Code(.openRolledBack)
        /// The controller was shut down.
        public static let shutdown = Code(.shutdown)
        /// An attached service failed or was cancelled while starting; ``UserSessionError/serviceName`` names it.
        public static let serviceStartFailed = Code(.serviceStartFailed)
        /// No stored session exists for the identifier: the user must sign in (for example
        /// ``UserSessionRegistry/session(for:)`` for a user the store does not know).
        public static let noStoredSession = Code(.noStoredSession)
        /// Stored credentials exist but are expired and cannot be refreshed.
        public static let credentialsUnusable = Code(.credentialsUnusable)
        /// Stored data is corrupt or truncated. The data is kept for inspection.
        public static let storeCorrupt = Code(.storeCorrupt)
        /// A token store failed to read or write.
        public static let storeFailure = Code(.storeFailure)
        /// Stored data was written by a newer, unknown format version.
        public static let unsupportedFormatVersion = Code(.unsupportedFormatVersion)
        /// A remote token cache answered `"status": "false"`; see ``UserSessionError/remoteErrorCode``.
        public static let remoteStoreRejected = Code(.remoteStoreRejected)
        /// A network request failed, timed out, or got an unusable response.
        public static let transportFailure = Code(.transportFailure)
        /// An endpoint uses plain HTTP on a non-loopback host.
        public static let insecureEndpoint = Code(.insecureEndpoint)
        /// A refresh was needed but the controller has no refresher, or the credentials have no refresh token.
        public static let noRefresher = Code(.noRefresher)
        /// Refreshing credentials failed; ``UserSessionError/failureClass`` says how.
        public static let refreshFailed = Code(.refreshFailed)
        /// Too many refreshes happened in a short window; the refresh-loop breaker tripped.
        public static let refreshLoop = Code(.refreshLoop)
        /// A token endpoint answered with a body that is not a valid token or error response.
        public static let malformedTokenResponse = Code(.malformedTokenResponse)
        /// A setting cannot work: a ``UserSessionController/Configuration`` (for example a negative duration, or a lead
        /// time longer than the proactive window; see ``UserSessionController/Configuration/validate()``), or a
        /// registry bound such as ``UserSessionRegistry/maximumOpenSessions`` below 1. The message names it.
        public static let invalidConfiguration = Code(.invalidConfiguration)
        /// ``UserSessionController/accessToken(minimumValidity:)`` asked for a validity longer than the tokens the
        /// refresher issues live.
        public static let minimumValidityUnreachable = Code(.minimumValidityUnreachable)
        /// A revocation endpoint (RFC 7009) refused to revoke a token, or answered with a redirect or a body over
        /// the size limit; ``UserSessionError/failureClass`` says how, as for refreshes.
        public static let revocationFailed = Code(.revocationFailed)
        /// A conditional save of a ``CoordinatedTokenStore`` found the record at another revision than the one it
        /// was based on: another process wrote it first. Nothing was written.
        public static let revisionConflict = Code(.revisionConflict)
        /// The authorization server refused the session's refresh token for good (`invalid_grant`), and that fact
        /// is recorded (in this process and in the store): restoring the session fails at once, without contacting
        /// the server, until the user signs in again. Its ``UserSessionError/failureClass`` is terminal.
        public static let refreshTokenRefused = Code(.refreshTokenRefused)

        /// A token request of a ``ClientCredentialsTokenManager`` (client credentials, or a token exchange) failed;
        /// ``UserSessionError/failureClass`` says how (misconfiguration or transient).
        public static let tokenRequestFailed = Code(.tokenRequestFailed)
        /// The token endpoint rejected the client itself (HTTP 401, or `invalid_client`) for a
        /// ``ClientCredentialsTokenManager`` key. Its ``UserSessionError/failureClass`` is terminal: the key asks no
        /// more until the client is reconfigured (``ClientCredentialsTokenManager/reconfigure(_:)``).
        public static let clientRejected = Code(.clientRejected)
        /// A ``ClientCredentialsTokenManager`` call named a scope, resource or audience that cannot be sent (a scope
        /// that is not an RFC 6749 scope token, a resource that is not an absolute URI without a fragment, an empty
        /// audience). Nothing was sent.
        public static let invalidTokenRequest = Code(.invalidTokenRequest)
        /// A DPoP key, thumbprint or proof (RFC 9449) could not be made: the ``DPoPProofSigner`` failed, or the
        /// credentials carry a key the signer cannot read. Its ``UserSessionError/failureClass`` is misconfiguration;
        /// nothing was sent.
        public static let dpopProofFailed = Code(.dpopProofFailed)
        /// DPoP was asked for (the credentials carry a ``DPoPKey``) and the token endpoint answered a `token_type`
        /// other than `DPoP`: a downgrade to bearer tokens (RFC 9449 §5), refused. For a refresh its
        /// ``UserSessionError/failureClass`` is terminal: the server's grant is no longer the one the session holds.
        public static let dpopDowngraded = Code(.dpopDowngraded)

        public var description: String { base.rawValue }
    }

    /// What went wrong.
    public var code: Code
    /// A human-readable explanation. Never contains secrets.
    public var message: String
    /// For refresh failures: terminal, misconfiguration, transient or cancelled.
    public var failureClass: RefreshFailureClass?
    /// For service failures: the name of the service.
    public var serviceName: String?
    /// For parse failures: the JSON path of the offending field, such as `result.user.id`.
    public var jsonPath: String?
    /// For remote token cache failures: the `errorCode` the server sent (for example `50001`).
    public var remoteErrorCode: String?
    /// The error that caused this one, if any.
    public var underlying: (any Error)?

    /// Creates an error.
    public init(
        _ code: Code,
        _ message: String,
        failureClass: RefreshFailureClass? = nil,
        serviceName: String? = nil,
        jsonPath: String? = nil,
        remoteErrorCode: String? = nil,
        underlying: (any Error)? = nil
    ) {
        self.code = code
        self.message = message
        self.failureClass = failureClass
        self.serviceName = serviceName
        self.jsonPath = jsonPath
        self.remoteErrorCode = remoteErrorCode
        self.underlying = underlying
    }

    public var description: String {
        var parts = ["UserSessionError.\(code): \(message)"]
        if let failureClass { parts.append("class: \(failureClass)") }
        if let serviceName { parts.append("service: \(serviceName)") }
        if let jsonPath { parts.append("path: \(jsonPath)") }
        if let remoteErrorCode { parts.append("remote code: \(remoteErrorCode)") }
        if let underlying { parts.append("cause: \(String(describing: type(of: underlying)))") }
        return parts.joined(separator: "; ")
    }
}

extension UserSessionError: Equatable {
    /// Errors are equal when their codes are equal.
    public static func == (lhs: UserSessionError, rhs: UserSessionError) -> Bool { lhs.code == rhs.code }
}

extension UserSessionError: CustomDebugStringConvertible {
    public var debugDescription: String { description }
}

extension UserSessionError: CustomReflectable {
    // The underlying error may be a user type that prints secrets; dump() shows only our own fields.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "code": code.description, "message": message,
                "failureClass": failureClass.map { "\($0)" } ?? "nil",
                "serviceName": serviceName ?? "nil",
            ],
            displayStyle: .struct
        )
    }
}
