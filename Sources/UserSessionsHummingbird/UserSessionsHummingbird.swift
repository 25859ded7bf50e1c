#if Hummingbird
@_exported import UserSessionsWeb
#endif
