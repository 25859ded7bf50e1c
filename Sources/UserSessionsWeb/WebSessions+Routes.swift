#if Hummingbird || Vapor
import Foundation
import HTTPTypes
import UserSessions
import UserSessionsOpenIDConnect

extension WebSessions {
    /// The largest body `POST <prefix>/backchannel-logout` reads: 64 KiB.
    static let maximumLogoutRequestBytes = 64 * 1024

    /// The routes every adapter mounts under ``WebSessionConfiguration/routePrefix`` (here `/auth`), and what they do:
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
    package enum Route: String, Sendable, CaseIterable {
        case login
        case callback
        case logout
        case backChannelLogout = "backchannel-logout"
        case user

        /// The route's method.
        package var method: HTTPRequest.Method {
            switch self {
            case .login, .callback, .user: .get
            case .logout, .backChannelLogout: .post
            }
        }
    }

    /// Answers `request` on `route`.
    package func respond(to request: WebRequest, on route: Route) async -> WebResponse {
        switch route {
        case .login: await login(request)
        case .callback: await callback(request)
        case .logout: await logout(request)
        case .backChannelLogout: await backChannelLogout(request)
        case .user: await user(request)
        }
    }

    func login(_ request: WebRequest) async -> WebResponse {
        let returnTo = ReturnPath.local(request.queryParameter("returnTo"))
        let earlier = request.cookie(configuration.signInCookieName)
        do {
            let redirect = try await openID.authorizationRedirect(
                AuthorizationOptions(context: ["returnTo": returnTo]), replacing: earlier)
            var response = WebResponse.redirect(to: redirect.url.absoluteString, status: .found)
            response.setCookie(signInCookie(redirect.sealedPendingSignIn))
            return response
        } catch {
            logger.error("starting a sign-in failed", metadata: ["code": "\(error.code)"])
            return error.failureClass == .transient ? WebResponse.unavailable() : signInFailed(error, request)
        }
    }

    func callback(_ request: WebRequest) async -> WebResponse {
        let signIn: OpenIDSignIn
        let sealed = request.cookie(configuration.signInCookieName)
        do {
            signIn = try await openID.completeSignIn(
                callbackQuery: request.query ?? "", sealedPendingSignIn: sealed)
        } catch {
            logger.warning("a sign-in was refused", metadata: ["code": "\(error.code)"])
            var response = error.failureClass == .transient ? WebResponse.unavailable() : signInFailed(error, request)
            if sealed != nil { response.setCookie(clearedSignInCookie()) }
            return response
        }
        do {
            let cookie = try await openBrowserSession(
                signIn.prototype, subject: signIn.claims.subject, sessionID: signIn.claims.sessionID,
                replacingCookie: request.cookie(configuration.cookieName))
            var response = WebResponse.redirect(to: ReturnPath.local(signIn.context["returnTo"]), status: .found)
            response.setCookie(cookie)
            response.setCookie(clearedSignInCookie())
            return response
        } catch {
            logger.error("opening a signed-in session failed (\(type(of: error)))")
            return WebResponse.unavailable()
        }
    }

    func logout(_ request: WebRequest) async -> WebResponse {
        if let refusal = CrossSiteRequestCheck(origin: configuration.origin).refusal(of: request) { return refusal }
        var location = configuration.postLogoutRedirectURL.absoluteString
        let found: (WebSessionKey, WebSessionRecord)?
        do {
            found = try await record(of: request)
        } catch {
            return WebResponse.unavailable()
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
                return WebResponse.unavailable()
            }
        }
        var response = WebResponse.redirect(to: location, status: .seeOther)
        response.setCookie(clearedCookie())
        if sentState { response.setCookie(postLogoutCookie(state)) }
        return response
    }

    func backChannelLogout(_ request: WebRequest) async -> WebResponse {
        guard let body = await request.body(upTo: Self.maximumLogoutRequestBytes) else {
            return WebResponse.json(["error": "invalid_request"], status: .badRequest)
        }
        var form = URLComponents()
        form.percentEncodedQuery = String(decoding: body, as: UTF8.self).replacingOccurrences(of: "+", with: "%20")
        guard let token = form.queryItems?.first(where: { $0.name == "logout_token" })?.value, !token.isEmpty else {
            return WebResponse.json(["error": "invalid_request"], status: .badRequest)
        }
        let identifiers: [String]
        do {
            identifiers = try await openID.handleBackChannelLogout(logoutToken: token, registry: registry)
        } catch  where error.code == .signOutFailed || error.code == .storeFailure {
            logger.error("a back-channel logout failed", metadata: ["code": "\(error.code)"])
            return WebResponse.json(["error": "temporarily_unavailable"], status: .serviceUnavailable)
        } catch {
            logger.warning("a back-channel logout was refused", metadata: ["code": "\(error.code)"])
            return WebResponse.json(["error": "invalid_request"], status: .badRequest)
        }
        do {
            for identifier in identifiers { try await store.removeAll(identifier: identifier) }
        } catch {
            logger.error("a back-channel logout could not delete browser records (\(type(of: error)))")
            return WebResponse.json(["error": "temporarily_unavailable"], status: .serviceUnavailable)
        }
        logger.info("a back-channel logout signed out \(identifiers.count) user(s)")
        return WebResponse(status: .ok, headers: [.cacheControl: "no-store"])
    }

    func user(_ request: WebRequest) async -> WebResponse {
        switch await resolve(request) {
        case .session(let session): return WebResponse.json(session.record.claims, status: .ok)
        case .signedOut(let clearCookie): return unauthenticated(request, clearCookie: clearCookie, api: true)
        case .unavailable: return WebResponse.unavailable()
        }
    }

    /// The 400 of a refused sign-in: the failure's code, never its message or a token; a short page that says
    /// why for a navigation, JSON otherwise.
    func signInFailed(_ error: OpenIDConnectError, _ request: WebRequest) -> WebResponse {
        guard request.isNavigation else {
            return WebResponse.json(["error": "sign_in_failed", "code": error.code.rawValue], status: .badRequest)
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
        return SecurityHeaders.page(page, status: .badRequest)
    }
}
#endif
