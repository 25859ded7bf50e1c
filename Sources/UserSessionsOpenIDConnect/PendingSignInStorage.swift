#if OpenIDConnect

/// Where a pending sign-in is kept between ``OpenIDConnectClient/authorizationRedirect(_:replacing:)`` and the
/// callback.
///
/// Either way the browser that started the sign-in keeps it sealed
/// (``AuthorizationRedirect/sealedPendingSignIn``), and a callback completes only with it: a callback URL opened in
/// another browser completes nothing (no login CSRF).
public struct PendingSignInStorage: Sendable, Hashable, CustomStringConvertible {
    private enum Kind: Hashable {
        case browser
        case stateStore
    }

    private let kind: Kind

    private init(_ kind: Kind) { self.kind = kind }

    /// Only in the browser (the default): the server keeps nothing per pending sign-in, so no flood of sign-ins
    /// can fill anything, and a fleet needs no shared store for them (only the same
    /// ``OpenIDConnectConfiguration/pendingSignInKeys``). A completed sign-in's `state` is remembered in this
    /// process until the pending sign-in would have expired, so a callback replayed here is refused before any
    /// code exchange; the provider refuses a replayed code anywhere.
    public static let browser = PendingSignInStorage(.browser)

    /// In the browser and in the ``OpenIDConnectStateStore`` too, which consumes it at the callback: a `state` is
    /// used once across every process sharing the store. A browser's new sign-in replaces its earlier one
    /// (``OpenIDConnectClient/authorizationRedirect(_:replacing:)``), so a browser holds at most one there, and the
    /// store holds at most ``OpenIDConnectConfiguration/maximumPendingSignIns``: when that is full, a new sign-in
    /// drops the oldest pending one instead of being refused. Memory stays bounded and nobody is locked out, but
    /// the trade-off remains: a client that drops its cookies and starts sign-ins faster than users finish theirs
    /// pushes real users' pending sign-ins out before they complete (their callback then fails with
    /// ``OpenIDConnectError/Code/stateUnknown`` and they start again). ``browser`` has none of this; choose this
    /// mode only behind rate limiting.
    public static let stateStore = PendingSignInStorage(.stateStore)

    /// Whether the state store keeps the pending sign-ins.
    var usesStateStore: Bool { kind == .stateStore }

    /// `browser` or `stateStore`.
    public var description: String { kind == .browser ? "browser" : "stateStore" }
}
#endif
