#if Vapor
import UserSessionsWeb
import Vapor

/// The signed-in user in `req.auth`, where Vapor applications expect it: `WebSessionMiddleware` logs it in, and
/// `try req.auth.require(WebSession.self)` reads it in a route.
extension WebSession: Authenticatable {}
#endif
