import HTTPTypes
import Hummingbird
import Logging
import UserSessions

/// A request context that carries the controller of the request's user, once ``UserSessionMiddleware`` found it.
struct UserRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    /// The open session of the user named by the request; set by ``UserSessionMiddleware``.
    var session: UserSessionController?

    init(source: ApplicationRequestContextSource) {
        coreContext = CoreRequestContextStorage(source: source)
    }

    /// The controller the middleware resolved; a 500 if a route using it was left outside the middleware.
    func requireSession() throws -> UserSessionController {
        guard let session else { throw HTTPError(.internalServerError, message: "no session middleware") }
        return session
    }
}

/// Resolves the request's user (the `X-User-ID` header) through the registry's get-or-restore, and maps the
/// package's errors, from the lookup and from the routes behind it, onto HTTP statuses:
///
/// | error | status |
/// |---|---|
/// | no header, unknown user (`noStoredSession`), invalid identifier | 401 |
/// | terminal refresh failure (`invalid_grant`: revoked), unusable stored credentials | 401 |
/// | transient refresh failure (network, 5xx, timeout), registry shutting down | 503 |
/// | misconfiguration (wrong client secret…) and anything else | 500 |
///
/// A 401 tells the client to sign the user in again; a 503 to retry later, the session stays as it was.
struct UserSessionMiddleware: RouterMiddleware {
    typealias Context = UserRequestContext

    let registry: UserSessionRegistry

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard let identifier = request.headers[.userID], !identifier.isEmpty else {
            throw HTTPError(.unauthorized, message: "no X-User-ID header")
        }
        var context = context
        context.logger[metadataKey: "user"] = .string(identifier)
        do {
            context.session = try await registry.session(for: identifier)
            return try await next(request, context)
        } catch let error as UserSessionError {
            let status = Self.status(for: error)
            // The error's description never holds a token; the user id is in the metadata.
            context.logger.log(
                level: status == .internalServerError ? .error : .info, "request refused",
                metadata: ["status": "\(status.code)", "error": "\(error.code)"])
            throw HTTPError(status, message: Self.message(for: status))
        }
    }

    /// The status for an error of the package.
    static func status(for error: UserSessionError) -> HTTPResponse.Status {
        switch error.code {
        case .noStoredSession, .invalidIdentifier, .credentialsUnusable, .sessionNotOpen:
            return .unauthorized
        case .shutdown:
            return .serviceUnavailable
        default:
            break
        }
        switch error.failureClass {
        case .terminal?: return .unauthorized
        case .transient?: return .serviceUnavailable
        default: return .internalServerError
        }
    }

    static func message(for status: HTTPResponse.Status) -> String {
        switch status {
        case .unauthorized: "sign in again"
        case .serviceUnavailable: "try again later"
        default: "internal error"
        }
    }
}

extension HTTPField.Name {
    /// `X-User-ID`: the user a request acts for. A real server takes it from its own authentication (a session
    /// cookie, a JWT it verified), never from the client as is.
    static let userID: HTTPField.Name = {
        guard let name = HTTPField.Name("X-User-ID") else { preconditionFailure("X-User-ID is a valid field name") }
        return name
    }()
}
