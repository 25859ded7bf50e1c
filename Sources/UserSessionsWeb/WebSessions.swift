#if Hummingbird || Vapor
import Foundation
import HTTPTypes
import Logging
import UserSessions
import UserSessionsOpenIDConnect

/// Web sessions for a server ("backend for frontend"): the browser holds an opaque cookie, the server holds the
/// user's tokens.
///
/// This type holds every decision, free of any framework; the Hummingbird adapter (`UserSessionsHummingbird`) and
/// the Vapor adapter (`UserSessionsVapor`) only mount its routes, run its middleware decisions and translate requests
/// and responses:
///
/// - The routes `GET login`, `GET callback`, `POST logout`, `POST backchannel-logout` and `GET user`, under
///   ``WebSessionConfiguration/routePrefix``.
/// - A middleware resolving the cookie to the user's controller (through the registry's get-or-restore) for the
///   application's own routes; a cross-site request check refusing cross-site state changes; a proxy forwarding API
///   calls with the user's access token (``TokenForwardingProxy``).
///
/// The cookie's value is 256 random bits, `HttpOnly`, `SameSite=Lax`, `Path=/`, and `Secure` with the `__Host-`
/// prefix unless the public URL is loopback HTTP. The server keeps a ``WebSessionRecord`` under the value's
/// SHA-256 in a ``WebSessionStore``; a new value is issued at every sign-in, and the record is deleted at sign-out,
/// at a back-channel logout, and when the idle or absolute lifetime ends. Cookie values and tokens never appear in
/// logs, errors or responses.
public final class WebSessions: Sendable {
    /// The OpenID Connect client users sign in with.
    public let openID: OpenIDConnectClient
    /// The registry of the users' sessions (their tokens).
    public let registry: UserSessionRegistry
    /// Where browser records are kept.
    public let store: any WebSessionStore
    /// The settings.
    public let configuration: WebSessionConfiguration
    /// Where sign-ins, sign-outs and failures are logged (never a cookie value or a token).
    public let logger: Logger

    /// Web sessions over `openID` and `registry`, with browser records in `store`.
    ///
    /// - Parameters:
    ///   - openID: The client users sign in with; its redirect URI should be
    ///     ``WebSessionConfiguration/callbackURL``.
    ///   - registry: The registry the sessions are opened in. Give it the PostgreSQL token store (and `openID` the
    ///     PostgreSQL state store) for a fleet.
    ///   - store: Where browser records are kept. Default: in memory.
    ///   - configuration: The settings.
    ///   - logger: The logger. Default: one labelled `UserSessionsWeb`.
    /// - Throws: ``WebSessionError/Code/invalidConfiguration`` when ``WebSessionConfiguration/validate()`` does.
    public init(
        openID: OpenIDConnectClient, registry: UserSessionRegistry,
        store: any WebSessionStore = InMemoryWebSessionStore(), configuration: WebSessionConfiguration,
        logger: Logger = Logger(label: "UserSessionsWeb")
    ) throws(WebSessionError) {
        try configuration.validate()
        self.openID = openID
        self.registry = registry
        self.store = store
        self.configuration = configuration
        self.logger = logger
        cookieName = configuration.cookieName
    }

    /// The session cookie's name, worked out once (every request looks for it).
    private let cookieName: String

    /// The current time.
    package var now: Date { configuration.clock.now() }

    // MARK: - Resolving a browser

    /// What a request's cookie leads to.
    package enum Resolution: Sendable {
        /// No session; `clearCookie` when the request carried a cookie that must be cleared.
        case signedOut(clearCookie: Bool)
        /// The signed-in user.
        case session(WebSession)
        /// The session could not be resolved for now (a store or provider failure); the browser stays signed in.
        case unavailable
    }

    /// The key of a session cookie's value, when it has the shape this library issues; `hadCookie` when there was
    /// a value at all.
    package func key(ofCookieValue value: String?) -> (key: WebSessionKey?, hadCookie: Bool) {
        guard let value else { return (nil, false) }
        guard WebSessionCookieValue.isWellFormed(Substring(value)) else { return (nil, true) }
        return (WebSessionKey(cookieValue: value), true)
    }

    /// The key of the request's cookie, when it carries one of the shape this library issues.
    func key(of request: WebRequest) -> (key: WebSessionKey?, hadCookie: Bool) {
        key(ofCookieValue: request.cookie(cookieName))
    }

    /// The unexpired record of the request's cookie; an expired or unreadable record is removed.
    func record(of request: WebRequest) async throws(WebSessionError) -> (WebSessionKey, WebSessionRecord)? {
        guard let key = key(of: request).key else { return nil }
        return try await record(for: key)
    }

    /// The unexpired record under `key`; an expired or unreadable record is removed.
    func record(for key: WebSessionKey) async throws(WebSessionError) -> (WebSessionKey, WebSessionRecord)? {
        let record: WebSessionRecord?
        do {
            record = try await store.load(key: key)
        } catch let error as WebSessionError where error.code == .storeCorrupt {
            logger.warning("a browser record was unreadable and is removed", metadata: ["key": "\(key)"])
            try? await store.remove(key: key)
            return nil
        } catch {
            throw Self.storeFailure(error)
        }
        guard let record else { return nil }
        let now = self.now
        if record.isExpired(at: now, idleTimeout: configuration.idleTimeout) {
            logger.info("a browser's session ended (idle or absolute lifetime)", metadata: ["key": "\(key)"])
            try? await store.remove(key: key)
            return nil
        }
        if now.timeIntervalSince(record.lastSeenAt) >= configuration.touchInterval.timeInterval {
            try? await store.touch(key: key, lastSeenAt: now)
        }
        return (key, record)
    }

    /// Resolves the request's cookie to the signed-in user: the browser's record, then the user's controller
    /// through the registry's get-or-restore.
    package func resolve(_ request: WebRequest) async -> Resolution {
        // The cookie is read and hashed once per request.
        let (cookieKey, hadCookie) = key(of: request)
        let found: (WebSessionKey, WebSessionRecord)?
        do {
            if let cookieKey { found = try await record(for: cookieKey) } else { found = nil }
        } catch {
            logger.error("the browser records are unavailable: \(error)")
            return .unavailable
        }
        guard let (key, record) = found else { return .signedOut(clearCookie: hadCookie) }
        do {
            let controller = try await registry.session(for: record.identifier)
            return .session(WebSession(controller: controller, record: record, key: key))
        } catch {
            switch await handle(error, identifier: record.identifier) {
            case .signedOut: return .signedOut(clearCookie: true)
            case .unavailable: return .unavailable
            }
        }
    }

    /// What a failure of the user's session means for the browser.
    package enum FailureOutcome: Sendable {
        /// The session is gone for good: the browser was signed out.
        case signedOut
        /// A passing failure: the browser stays signed in.
        case unavailable
    }

    /// Signs the browser out when `error` ends the user's session for good (a terminal refresh failure, a refused
    /// refresh token, nothing stored or unusable credentials); any other error is passing.
    package func handle(_ error: any Error, identifier: String) async -> FailureOutcome {
        guard let error = error as? UserSessionError else {
            logger.error("resolving a user's session failed (\(type(of: error)))")
            return .unavailable
        }
        guard error.requiresSignIn else {
            logger.warning("a user's session is unavailable for now", metadata: ["code": "\(error.code)"])
            return .unavailable
        }
        logger.notice("a user's session ended; signing the browser out", metadata: ["code": "\(error.code)"])
        _ = try? await store.removeAll(identifier: identifier)
        try? await registry.closeAndClear(identifier: identifier)
        return .signedOut
    }

    // MARK: - Opening and ending browser sessions

    /// Opens `prototype`'s session in the registry and binds a new browser session to it: returns the cookie to
    /// set on the response (send its ``WebSessionCookie/headerValue`` as `Set-Cookie`). The callback route calls it
    /// after a sign-in; call it yourself (or the adapter's overload taking the framework's request) for users signed
    /// in another way.
    ///
    /// The cookie's value is new (256 random bits); the record of the cookie `request` came with, if any, is
    /// deleted first, so a cookie planted before the sign-in never becomes a signed-in one (no session fixation).
    ///
    /// Without a `replacingCookie` argument, the session cookie of no request is replaced.
    ///
    /// - Parameters:
    ///   - prototype: The signed-in user's session (its identifier, user info and credentials).
    ///   - subject: The ID token's `sub`; default the user info's `id`.
    ///   - sessionID: The ID token's `sid`, if any.
    ///   - replacingCookie: The value of the session cookie the request came with, if any (its record is deleted).
    /// - Throws: What `UserSessionRegistry/open(_:)` throws; ``WebSessionError`` when the store fails.
    public func openBrowserSession(
        _ prototype: UserSessionPrototype, subject: String? = nil, sessionID: String? = nil,
        replacingCookie: String?
    ) async throws -> WebSessionCookie {
        if let old = key(ofCookieValue: replacingCookie).key { try await store.remove(key: old) }
        try await registry.open(prototype)
        let value = WebSessionCookieValue.random()
        let now = self.now
        let userInfo = prototype.userInfo
        var claims = userInfo.attributes
        claims["sub"] = subject ?? userInfo.id
        if let name = userInfo.name { claims["name"] = name }
        if let email = userInfo.email { claims["email"] = email }
        let record = WebSessionRecord(
            identifier: prototype.identifier, subject: subject ?? userInfo.id, sessionID: sessionID, claims: claims,
            createdAt: now, lastSeenAt: now,
            absoluteExpiresAt: now.addingTimeInterval(configuration.absoluteLifetime.timeInterval))
        try await store.insert(record, key: WebSessionKey(cookieValue: value))
        logger.info("a browser signed in", metadata: ["identifier": "\(record.identifier)"])
        return sessionCookie(value)
    }

    /// Removes every browser record whose idle or absolute lifetime has ended; returns how many. Records are also
    /// removed when their browser comes back too late; call this now and then so the others do not pile up.
    @discardableResult
    public func removeExpiredRecords() async throws -> Int {
        try await store.removeExpired(now: now, idleTimeout: configuration.idleTimeout)
    }

    // MARK: - Responses

    /// The session cookie carrying `value`.
    func sessionCookie(_ value: String) -> WebSessionCookie {
        WebSessionCookie(
            name: configuration.cookieName, value: value, maxAge: Int(configuration.absoluteLifetime.timeInterval),
            isSecure: configuration.isSecure)
    }

    /// The cookie that keeps a sealed pending sign-in in the browser until the callback.
    func signInCookie(_ sealed: String) -> WebSessionCookie {
        WebSessionCookie(
            name: configuration.signInCookieName, value: sealed,
            maxAge: Int(openID.configuration.pendingSignInLifetime.timeInterval.rounded(.up)),
            isSecure: configuration.isSecure)
    }

    /// A cookie that makes the browser forget its pending sign-in.
    func clearedSignInCookie() -> WebSessionCookie {
        WebSessionCookie(name: configuration.signInCookieName, value: "", maxAge: 0, isSecure: configuration.isSecure)
    }

    /// The cookie that keeps the `state` of an RP-initiated logout until the provider sends the browser back.
    func postLogoutCookie(_ state: String) -> WebSessionCookie {
        WebSessionCookie(
            name: configuration.signOutCookieName, value: state, maxAge: 600, isSecure: configuration.isSecure)
    }

    /// Checks, on the post-logout page, that the `state` the provider sent the browser back with is the one
    /// `POST <prefix>/logout` sent (kept in the cookie ``WebSessionConfiguration/signOutCookieName`` for 10 minutes):
    /// then the page knows the logout it confirms is the one this browser asked for, not a link from elsewhere.
    ///
    /// - Parameters:
    ///   - returnedState: The query's `state` parameter, if any.
    ///   - signOutCookie: The value of the cookie ``WebSessionConfiguration/signOutCookieName``, if any.
    /// - Throws: `OpenIDConnectError` of code `postLogoutStateMismatch` when the query's `state` or the cookie is
    ///   missing, or they differ.
    public func verifyPostLogoutState(returnedState: String?, signOutCookie: String?) throws(OpenIDConnectError) {
        try PostLogoutState.check(returned: returnedState, expected: signOutCookie)
    }

    /// ``verifyPostLogoutState(returnedState:signOutCookie:)`` for a request.
    package func verifyPostLogoutState(_ request: WebRequest) throws(OpenIDConnectError) {
        try verifyPostLogoutState(
            returnedState: request.queryParameter("state"),
            signOutCookie: request.cookie(configuration.signOutCookieName))
    }

    /// A cookie that makes the browser forget the session cookie.
    package func clearedCookie() -> WebSessionCookie {
        WebSessionCookie(name: configuration.cookieName, value: "", maxAge: 0, isSecure: configuration.isSecure)
    }

    /// The answer to a request without a session: navigations (GET with `Accept: text/html`) are redirected to
    /// the login route with `returnTo`, other requests get a JSON 401, unless `api` (always the 401).
    package func unauthenticated(_ request: WebRequest, clearCookie: Bool, api: Bool) -> WebResponse {
        var response: WebResponse
        if !api, request.isNavigation {
            let target = request.path + (request.query.map { "?" + $0 } ?? "")
            let returnTo = ReturnPath.local(target)
            response = .redirect(
                to: configuration.routePrefix + "/login?returnTo=" + Self.percentEncode(returnTo), status: .found)
        } else {
            response = .json(["error": "unauthenticated"], status: .unauthorized)
        }
        if clearCookie { response.setCookie(clearedCookie()) }
        return response
    }

    /// `text` with everything but RFC 3986's unreserved characters percent-encoded (`/` becomes `%2F`).
    static func percentEncode(_ text: String) -> String {
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }

    static func storeFailure(_ error: any Error) -> WebSessionError {
        if let error = error as? WebSessionError { return error }
        return WebSessionError(.storeFailure, "the store of browser records failed (\(type(of: error)))")
    }
}
#endif
