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
    /// - `GET /auth/login?returnTo=/path` records a pending sign-in and redirects (302) to the provider. `returnTo`
    ///   must be a local path; anything else (`https://…`, `//host`, a backslash) becomes `/`.
    /// - `GET /auth/callback` completes the sign-in (state, PKCE, ID token), opens the user's session in the
    ///   registry, issues a new cookie (the old record, if any, is deleted) and redirects (302) to `returnTo`. A
    ///   failed sign-in is a 400 JSON naming the failure's code; nothing is opened.
    /// - `POST /auth/logout` refuses a cross-site request (403), signs the user out (the OpenID Connect client's
    ///   `signOut`, which closes and clears the session and revokes), deletes the user's browser records, clears the
    ///   cookie and redirects (303) to the provider's end-session URL (or to the post-logout path).
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
        do {
            let redirect = try await openID.authorizationRedirect(AuthorizationOptions(context: ["returnTo": returnTo]))
            return Self.redirect(to: redirect.url.absoluteString, status: .found)
        } catch {
            logger.error("starting a sign-in failed", metadata: ["code": "\(error.code)"])
            return error.failureClass == .transient ? Self.unavailable() : Self.signInFailed(error)
        }
    }

    func callback(_ request: Request) async -> Response {
        let signIn: OpenIDSignIn
        do {
            signIn = try await openID.completeSignIn(callbackQuery: request.uri.query ?? "")
        } catch {
            logger.warning("a sign-in was refused", metadata: ["code": "\(error.code)"])
            return error.failureClass == .transient ? Self.unavailable() : Self.signInFailed(error)
        }
        do {
            let cookie = try await openBrowserSession(
                signIn.prototype, subject: signIn.claims.subject, sessionID: signIn.claims.sessionID,
                replacingCookieOf: request)
            var response = Self.redirect(to: ReturnPath.local(signIn.context["returnTo"]), status: .found)
            response.setCookie(cookie)
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
        if let (key, record) = found {
            do {
                try await store.remove(key: key)
                let logoutURL = try await openID.signOut(
                    identifier: record.identifier, registry: registry,
                    postLogoutRedirectURI: configuration.postLogoutRedirectURL)
                try await store.removeAll(identifier: record.identifier)
                if let logoutURL { location = logoutURL.absoluteString }
                logger.info("a browser signed out", metadata: ["identifier": "\(record.identifier)"])
            } catch {
                logger.error("signing a user out failed (\(type(of: error)))")
                return Self.unavailable()
            }
        }
        var response = Self.redirect(to: location, status: .seeOther)
        response.setCookie(clearedCookie())
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
        do {
            let identifiers = try await openID.handleBackChannelLogout(logoutToken: token, registry: registry)
            for identifier in identifiers { try await store.removeAll(identifier: identifier) }
            logger.info("a back-channel logout signed out \(identifiers.count) user(s)")
            return Response(status: .ok, headers: [.cacheControl: "no-store"])
        } catch let error as OpenIDConnectError {
            logger.warning("a back-channel logout was refused", metadata: ["code": "\(error.code)"])
            return Self.json(["error": "invalid_request"], status: .badRequest)
        } catch {
            logger.error("a back-channel logout failed (\(type(of: error)))")
            return Self.json(["error": "temporarily_unavailable"], status: .serviceUnavailable)
        }
    }

    func user(_ request: Request) async -> Response {
        switch await resolve(request) {
        case .session(let session): return Self.json(session.record.claims, status: .ok)
        case .signedOut(let clearCookie): return unauthenticated(request, clearCookie: clearCookie, api: true)
        case .unavailable: return Self.unavailable()
        }
    }

    /// The 400 of a refused sign-in: the failure's code, never its message or a token.
    static func signInFailed(_ error: OpenIDConnectError) -> Response {
        json(["error": "sign_in_failed", "code": error.code.rawValue], status: .badRequest)
    }
}
#endif
