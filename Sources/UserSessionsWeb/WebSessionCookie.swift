#if Hummingbird || Vapor

/// A cookie the web-session layer sets, with every attribute it decides: each adapter sends its ``headerValue`` as a
/// `Set-Cookie` field, so the attributes are written in one place for every framework.
///
/// The layer's cookies are always `HttpOnly` and `SameSite=Lax` on `Path=/`; `Secure` (and, for the session cookie,
/// the `__Host-` prefix of its name) unless the public URL is loopback HTTP.
public struct WebSessionCookie: Sendable, Hashable, CustomStringConvertible {
    /// The cookie's name.
    public let name: String
    /// The cookie's value; never shown in ``description``.
    public let value: String
    /// How long the browser keeps it, in seconds; `0` makes the browser forget it.
    public let maxAge: Int
    /// Whether the browser sends it over HTTPS only.
    public let isSecure: Bool

    /// A cookie; `HttpOnly`, `SameSite=Lax` and `Path=/` are not choices.
    package init(name: String, value: String, maxAge: Int, isSecure: Bool) {
        self.name = name
        self.value = value
        self.maxAge = maxAge
        self.isSecure = isSecure
    }

    /// The cookie's path: always `/`.
    public var path: String { "/" }

    /// The `Set-Cookie` field's value: `name=value; Max-Age=…; Path=/; Secure; HttpOnly; SameSite=Lax`.
    public var headerValue: String {
        "\(name)=\(value); Max-Age=\(maxAge); Path=/" + (isSecure ? "; Secure" : "") + "; HttpOnly; SameSite=Lax"
    }

    /// The cookie's name and attributes, without its value.
    public var description: String {
        "WebSessionCookie(\(name), Max-Age=\(maxAge)\(isSecure ? ", Secure" : ""), HttpOnly, SameSite=Lax)"
    }
}
#endif
