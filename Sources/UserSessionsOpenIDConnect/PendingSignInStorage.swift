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
    /// used once across every process sharing the store. The store holds at most
    /// ``OpenIDConnectConfiguration/maximumPendingSignIns`` and a browser's new sign-in replaces its earlier one
    /// (``OpenIDConnectClient/authorizationRedirect(_:replacing:)``), but a client that drops its cookies can still
    /// fill that bound and keep other users from starting a sign-in until entries expire: choose it only behind
    /// rate limiting.
    public static let stateStore = PendingSignInStorage(.stateStore)

    /// Whether the state store keeps the pending sign-ins.
    var usesStateStore: Bool { kind == .stateStore }

    /// `browser` or `stateStore`.
    public var description: String { kind == .browser ? "browser" : "stateStore" }
}
#endif
