import Foundation

extension UserSessionPrototype {
    /// Parses a sign-in response such as
    /// `{"result": {"user": {"id": "ee977806d72865", "email": "foo@bar.com", "name": "Foo Bar"}}}`.
    ///
    /// SKELETON: to be implemented (issue 2).
    public init(signInResponse data: Data, receivedAt: Date = Date()) throws {
        throw UserSessionError(.malformedSignInResponse, "not implemented")
    }
}
