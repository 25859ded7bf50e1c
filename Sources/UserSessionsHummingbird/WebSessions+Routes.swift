#if Hummingbird
import Foundation
import Hummingbird
import UserSessions
import UserSessionsOpenIDConnect

extension WebSessions {
    /// The largest body `POST <prefix>/backchannel-logout` reads: 64 KiB.
    static let maximumLogoutRequestBytes = 64 * 1024

    /// Mounts the sign-in routes under ``WebSessionConfiguration/routePrefix`` (here `/auth`):
    ///
    /// - `GET /auth/login?returnTo=/path` starts a sign-in, keeps the sealed pending sign-in in the browser (the
    ///   cookie ``WebSessionConfiguration/signInCookieName``: `HttpOnly`, `SameSite=Lax`, `Path=/`, `Secure` and
    ///   `__Host-` on HTTPS, for the pending sign-in's lifetime) and redirects (302) to the provider. The server keeps
    ///   nothing for it. `returnTo` must be a local path; anything else (`https://…`, `//host`, a backslash) becomes
    ///   `/`.
    /// - `GET /auth/callback` completes the sign-in with that cookie (state, PKCE, ID token) and clears it, opens
    ///   the user's session in the registry, issues a new session cookie (the old record, if any, is deleted) and
    ///   redirects (302) to `returnTo`. A failed sign-in is a 400 naming the failure's code (a short HTML page for a
    ///   navigation, JSON otherwise); nothing is opened. A callback URL opened in another browser than the one that
    ///   started the sign-in (login CSRF) has no such cookie and fails so.
    /// - `POST /auth/logout` refuses a cross-site request (403), signs the user out (the OpenID Connect client's
    ///   `signOut`, which closes and clears the session and revokes), deletes the user's browser records, clears the
    ///   cookie and redirects (303) to the provider's end-session URL with a fresh `state`, kept in the browser's
    ///   cookie ``WebSessionConfiguration/signOutCookieName`` for ``verifyPostLogoutState(_:)`` (or to the
    ///   post-logout path when the provider offers no logout).
    /// - `POST /auth/backchannel-logout` verifies the provider's logout token, ends the user's session in the
    ///   registry (through its store, every instance) and deletes the user's browser records: 200, or 400 for a
    ///   token that does not verify.
    /// - `GET /auth/user` answers the signed-in user's claims as JSON (`sub`, `name`, `email`, …; never a token),
    ///   or a JSON 401.
    public func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        let group = router.group(RouterPath(configuration.routePrefix))
        group.get("login") { request, _ in await self.login(request) }
        group.get("callback") { request, _ in await self.callback(request) }
        group.post("logout") { request, _ in await self.logout(request) }
        group.post("backchannel-logout") { request, _ in await self.backChannelLogout(request) }
        group.get("user") { request, _ in await self.user(request) }
    }

    func login(_ request: Request) async -> Response {
        let returnTo = ReturnPath.local(request.uri.queryParameters.get("returnTo"))
        let earlier = request.cookies[configuration.signInCookieName].map { String($0.value) }
        do {
            let redirect = try await openID.authorizationRedirect(
                AuthorizationOptions(context: ["returnTo": returnTo]), replacing: earlier)
            var response = Self.redirect(to: redirect.url.absoluteString, status: .found)
            response.setCookie(signInCookie(redirect.sealedPendingSignIn))
            return response
        } catch {
            logger.error("starting a sign-in failed", metadata: ["code": "\(error.code)"])
            return error.failureClass == .transient ? Self.unavailable() : signInFailed(error, request)
        }
    }

    func callback(_ request: Request) async -> Response {
        let signIn: OpenIDSignIn
        let sealed = request.cookies[configuration.signInCookieName].map { String($0.value) }
        do {
            signIn = try await openID.completeSignIn(
                callbackQuery: request.uri.query ?? "", sealedPendingSignIn: sealed)
        } catch {
            logger.warning("a sign-in was refused", metadata: ["code": "\(error.code)"])
            var response = error.failureClass == .transient ? Self.unavailable() : signInFailed(error, request)
            if sealed != nil { response.setCookie(clearedSignInCookie()) }
            return response
        }
        do {
            let cookie = try await openBrowserSession(
                signIn.prototype, subject: signIn.claims.subject, sessionID: signIn.claims.sessionID,
                replacingCookieOf: request)
            var response = Self.redirect(to: ReturnPath.local(signIn.context["returnTo"]), status: .found)
            response.setCookie(cookie)
            response.setCookie(clearedSignInCookie())
            return response
        } catch {
            logger.error("opening a signed-in session failed (\(type(of: error)))")
            return Self.unavailable()
        }
    }

    func logout(_ request: Request) async -> Response {
        if let refusal = CrossSiteRequestCheck(origin: configuration.origin).refusal(of: request) { return refusal }
        var location = configuration.postLogoutRedirectURL.absoluteString
        let found: (WebSessionKey, WebSessionRecord)?
        do {
            found = try await record(of: request)
        } catch {
            return Self.unavailable()
        }
        let state = PostLogoutState.make()
        var sentState = false
        if let (key, record) = found {
            do {
                try await store.remove(key: key)
                let logout = try await openID.signOut(
                    identifier: record.identifier, registry: registry,
                    postLogoutRedirectURI: configuration.postLogoutRedirectURL, state: state)
                try await store.removeAll(identifier: record.identifier)
                switch logout {
                case .redirect(let url):
                    location = url.absoluteString
                    sentState = true
                case .notOffered:
                    break
                case .unavailable(let error):
                    logger.warning(
                        "the provider's logout URL could not be made; its session may live on",
                        metadata: ["code": "\(error.code)"])
                }
                logger.info("a browser signed out", metadata: ["identifier": "\(record.identifier)"])
            } catch {
                logger.error("signing a user out failed (\(type(of: error)))")
                return Self.unavailable()
            }
        }
        var response = Self.redirect(to: location, status: .seeOther)
        response.setCookie(clearedCookie())
        if sentState { response.setCookie(postLogoutCookie(state)) }
        return response
    }

    func backChannelLogout(_ request: Request) async -> Response {
        var request = request
        guard let body = try? await request.collectBody(upTo: Self.maximumLogoutRequestBytes) else {
            return Self.json(["error": "invalid_request"], status: .badRequest)
        }
        var form = URLComponents()
        form.percentEncodedQuery = String(buffer: body).replacingOccurrences(of: "+", with: "%20")
        guard let token = form.queryItems?.first(where: { $0.name == "logout_token" })?.value, !token.isEmpty else {
            return Self.json(["error": "invalid_request"], status: .badRequest)
        }
        let identifiers: [String]
        do {
            identifiers = try await openID.handleBackChannelLogout(logoutToken: token, registry: registry)
        } catch  where error.code == .signOutFailed || error.code == .storeFailure {
            logger.error("a back-channel logout failed", metadata: ["code": "\(error.code)"])
            return Self.json(["error": "temporarily_unavailable"], status: .serviceUnavailable)
        } catch {
            logger.warning("a back-channel logout was refused", metadata: ["code": "\(error.code)"])
            return Self.json(["error": "invalid_request"], status: .badRequest)
        }
        do {
            for identifier in identifiers { try await store.removeAll(identifier: identifier) }
        } catch {
            logger.error("a back-channel logout could not delete browser records (\(type(of: error)))")
            return Self.json(["error": "temporarily_unavailable"], status: .serviceUnavailable)
        }
        logger.info("a back-channel logout signed out \(identifiers.count) user(s)")
        return Response(status: .ok, headers: [.cacheControl: "no-store"])
    }

    func user(_ request: Request) async -> Response {
        switch await resolve(request) {
        case .session(let session): return Self.json(session.record.claims, status: .ok)
        case .signedOut(let clearCookie): return unauthenticated(request, clearCookie: clearCookie, api: true)
        case .unavailable: return Self.unavailable()
        }
    }

    /// The 400 of a refused sign-in: the failure's code, never its message or a token; a short page that says
    /// why for a navigation, JSON otherwise.
    func signInFailed(_ error: OpenIDConnectError, _ request: Request) -> Response {
        guard Self.isNavigation(request) else {
            return Self.json(["error": "sign_in_failed", "code": error.code.rawValue], status: .badRequest)
        }
        let why: String
        switch error.code {
        case .pendingSignInMissing, .stateMismatch, .pendingSignInUnreadable, .stateUnknown:
            why =
                "This sign-in was not started in this browser, was already used, or took too long. "
                + "Nobody was signed in."
        case .authorizationDenied:
            why = "The sign-in was cancelled or refused at the identity provider. Nobody was signed in."
        default:
            why = "The identity provider's answer did not pass the checks. Nobody was signed in."
        }
        let page = """
            <!doctype html><html lang="en"><meta charset="utf-8"><title>Sign-in failed</title>
            <h1>Sign-in failed</h1><p id="reason">\(why)</p><p>Code: <code id="code">\(error.code.rawValue)</code></p>
            <p><a href="\(configuration.routePrefix)/login">Sign in again</a></p></html>
            """
        var response = SecurityHeaders.page(page, status: .badRequest)
        response.headers[.cacheControl] = "no-store"
        return response
    }
}
#endif
