#if Vapor
@_exported import UserSessionsWeb
#endif
