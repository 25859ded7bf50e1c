#if Hummingbird || Vapor
import Foundation
import UserSessions

/// How ``WebSessions`` binds browsers to users' sessions: the public URL, where the routes are, the cookie, and
/// the lifetimes of a browser's session.
public struct WebSessionConfiguration: Sendable {
    /// The URL browsers reach the application at, such as `https://app.example.com` (its origin counts; a path is
    /// ignored). HTTPS, or plain HTTP on a loopback host for development: then the cookie is sent without `Secure`
    /// and without the `__Host-` prefix.
    public var publicURL: URL
    /// The path the routes are mounted under, such as `/auth` (no trailing slash; `""` mounts them at the root).
    public var routePrefix: String
    /// The cookie's name without its prefix; the cookie is ``cookieName`` (`__Host-` prepended when secure).
    /// Default `user_session`.
    public var cookieBaseName: String
    /// A browser not seen for this long is signed out. Default 2 hours.
    public var idleTimeout: Duration
    /// A browser is signed out this long after it signed in, whatever it does. Default 24 hours.
    public var absoluteLifetime: Duration
    /// A browser's `lastSeenAt` is written at most once per this interval (one store write per interval, not per
    /// request). Default 60 s; keep it well under ``idleTimeout``.
    public var touchInterval: Duration
    /// The local path the provider sends the browser back to after signing out (`post_logout_redirect_uri`), and
    /// where `POST <prefix>/logout` goes when the provider has no end-session endpoint. Default `/`.
    public var postLogoutRedirectPath: String
    /// The header API and proxy calls must carry (a cross-site form cannot send one). Default `X-CSRF`; its value
    /// must be `1`.
    public var csrfHeaderName: String
    /// The clock of every expiry. Default the system clock.
    public var clock: SessionClock

    /// Creates a configuration with the defaults described on each property.
    public init(
        publicURL: URL, routePrefix: String = "/auth", cookieBaseName: String = "user_session",
        idleTimeout: Duration = .seconds(2 * 3600), absoluteLifetime: Duration = .seconds(24 * 3600),
        touchInterval: Duration = .seconds(60), postLogoutRedirectPath: String = "/", csrfHeaderName: String = "X-CSRF",
        clock: SessionClock = .system
    ) {
        self.publicURL = publicURL
        self.routePrefix = routePrefix
        self.cookieBaseName = cookieBaseName
        self.idleTimeout = idleTimeout
        self.absoluteLifetime = absoluteLifetime
        self.touchInterval = touchInterval
        self.postLogoutRedirectPath = postLogoutRedirectPath
        self.csrfHeaderName = csrfHeaderName
        self.clock = clock
    }

    /// Whether the cookie is `Secure` (and `__Host-` prefixed): unless the public URL is plain HTTP on loopback.
    public var isSecure: Bool {
        guard publicURL.scheme?.lowercased() == "http", let host = publicURL.host(percentEncoded: false) else {
            return true
        }
        return !SecureEndpoint.isLoopback(host: host)
    }

    /// The cookie's name: `__Host-` and ``cookieBaseName`` when secure, ``cookieBaseName`` alone on loopback HTTP.
    public var cookieName: String { isSecure ? "__Host-" + cookieBaseName : cookieBaseName }

    /// The name of the cookie that keeps a sign-in's sealed pending state in the browser between `<prefix>/login`
    /// and `<prefix>/callback`: ``cookieName`` followed by `_signin`.
    public var signInCookieName: String { cookieName + "_signin" }

    /// The name of the cookie that keeps the `state` of an RP-initiated logout until the provider sends the browser
    /// back to the post-logout path: ``cookieName`` followed by `_signout`.
    public var signOutCookieName: String { cookieName + "_signout" }

    /// The public URL's origin, such as `https://app.example.com` or `http://127.0.0.1:8080`, as browsers send it
    /// in `Origin`.
    public var origin: String {
        let scheme = publicURL.scheme?.lowercased() ?? "https"
        var origin = scheme + "://" + (publicURL.host(percentEncoded: true)?.lowercased() ?? "")
        if let port = publicURL.port, !(scheme == "https" && port == 443), !(scheme == "http" && port == 80) {
            origin += ":\(port)"
        }
        return origin
    }

    /// The URL of `path` on the public origin, such as `https://app.example.com/auth/callback`.
    public func publicURL(path: String) -> URL {
        URL(string: origin + path) ?? publicURL
    }

    /// The sign-in callback, `<origin><prefix>/callback`: register it with the provider, and give it as
    /// `OpenIDConnectConfiguration/redirectURI`.
    public var callbackURL: URL { publicURL(path: routePrefix + "/callback") }

    /// The post-logout redirect URI, `<origin><postLogoutRedirectPath>`: register it with the provider.
    public var postLogoutRedirectURL: URL { publicURL(path: postLogoutRedirectPath) }

    /// Checks that every setting can work.
    ///
    /// - Throws: ``WebSessionError/Code/invalidConfiguration`` naming the setting: a public URL that is neither
    ///   HTTPS nor loopback HTTP; a route prefix that does not start with `/` or ends with one; a cookie name with
    ///   characters other than letters, digits, `_` and `-`; lifetimes that are not positive, or an idle timeout
    ///   longer than the absolute lifetime; a post-logout path that is not local; an empty header name.
    public func validate() throws(WebSessionError) {
        func refuse(_ message: String) -> WebSessionError { WebSessionError(.invalidConfiguration, message) }
        do {
            try SecureEndpoint.check(publicURL, describedAs: "the public URL")
        } catch {
            throw refuse("the public URL must be HTTPS, or plain HTTP on a loopback host")
        }
        if !routePrefix.isEmpty, !routePrefix.hasPrefix("/") || routePrefix.hasSuffix("/") {
            throw refuse("the route prefix must start with / and not end with one")
        }
        let nameIsToken = cookieBaseName.utf8.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
        }
        if cookieBaseName.isEmpty || !nameIsToken { throw refuse("the cookie name must be letters, digits, _ and -") }
        if idleTimeout <= .zero || absoluteLifetime <= .zero || touchInterval < .zero {
            throw refuse("the idle timeout and the absolute lifetime must be longer than zero")
        }
        if idleTimeout > absoluteLifetime { throw refuse("the idle timeout is longer than the absolute lifetime") }
        if ReturnPath.local(postLogoutRedirectPath) != postLogoutRedirectPath {
            throw refuse("the post-logout redirect path must be a local path")
        }
        if csrfHeaderName.isEmpty { throw refuse("the CSRF header name is empty") }
    }
}

/// Where a browser may be sent back to after signing in: a local path, or `/`.
enum ReturnPath {
    /// `candidate` as a normalized local path when it is one (`/` then anything, no backslash, no control character
    /// or space, at most 2048 bytes, no scheme or host, no percent-encoded `.`, `/` or backslash); `/` otherwise.
    ///
    /// The path is normalized as a browser resolves it: `.` and `..` segments are removed and empty segments (`//`)
    /// collapsed, so no result is ever a network-path reference. `//evil.example`, `/\\evil.example`,
    /// `/.//evil.example`, `/%2F%2Fevil.example`, `https://evil.example` and `javascript:…` all become `/`, or a
    /// path on this host.
    static func local(_ candidate: String?) -> String {
        guard let candidate, candidate.hasPrefix("/"), !candidate.hasPrefix("//"), candidate.utf8.count <= 2048,
            candidate.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F && $0 != UInt8(ascii: "\\") }),
            let components = URLComponents(string: candidate), components.scheme == nil, components.host == nil
        else { return "/" }
        let end = candidate.firstIndex { $0 == "?" || $0 == "#" } ?? candidate.endIndex
        let path = candidate[..<end]
        let lowered = path.lowercased()
        guard !["%2e", "%2f", "%5c"].contains(where: { lowered.contains($0) }) else { return "/" }
        var segments: [Substring] = []
        for segment in path.split(separator: "/", omittingEmptySubsequences: true) {
            switch segment {
            case ".": continue
            case "..": _ = segments.popLast()
            default: segments.append(segment)
            }
        }
        var normalized = "/" + segments.joined(separator: "/")
        if path.hasSuffix("/"), !segments.isEmpty { normalized += "/" }
        return normalized + candidate[end...]
    }
}
#endif
