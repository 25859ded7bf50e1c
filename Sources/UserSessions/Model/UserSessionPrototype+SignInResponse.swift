import Foundation

extension UserSessionPrototype {
    /// Parses a sign-in response such as
    /// `{"result": {"user": {"id": "ee977806d72865", "email": "foo@bar.com", "name": "Foo Bar"}}}`.
    ///
    /// The identifier is the user's `id` (a string, or an integer converted to its decimal form; never empty).
    /// `email` and `name` are optional strings; other string members of `result.user` become
    /// ``UserInfo/attributes``.
    ///
    /// Token fields are read from the first of these objects that has a non-null `access_token`:
    /// `result.token`, `result.credentials`, `result`, then the top level. Without an `access_token` anywhere the
    /// prototype has no credentials and other token fields are ignored. From that object:
    /// - `access_token`: a non-empty string;
    /// - `refresh_token`, `token_type` (default `Bearer`): optional strings;
    /// - `expires_in`: optional seconds, a number or a decimal string, between 0 and ten years;
    ///   ``Credentials/expiresAt`` is `receivedAt + expires_in`;
    /// - `scope`: optional, space-separated (or an array of strings), becomes ``Credentials/grantedPermissions``;
    /// - `declined_scope` and `declined_permissions`: optional, same form, together become
    ///   ``Credentials/declinedPermissions``.
    ///
    /// The credentials' ``Credentials/lastRefreshedAt`` is `receivedAt` and their source
    /// ``Credentials/Source/signIn``. A JSON `null` counts as absent for optional fields.
    ///
    /// - Parameters:
    ///   - data: The response body.
    ///   - receivedAt: When the response was received; expiry counts from here.
    /// A document in which one object has two members with the same name (after decoding escapes, compared as
    /// Swift strings) is refused, whichever member comes first: JSON parsers disagree on which one wins, so another
    /// component could read a different token than this one.
    ///
    /// - Throws: ``UserSessionError`` with code ``UserSessionError/Code/malformedSignInResponse``: for invalid JSON
    ///   (including nesting deeper than 128 levels) or a top level that is not an object with `jsonPath` `nil`; for
    ///   a missing, mistyped or out-of-range field with ``UserSessionError/jsonPath`` naming it, such as
    ///   `result.user.id`; for a duplicate member with `jsonPath` naming it when the path is made of the field names
    ///   above (`nil` otherwise). Error messages never contain field values.
    public init(signInResponse data: Data, receivedAt: Date = Date()) throws {
        self = try SignInResponseParser(receivedAt: receivedAt).parse(data)
    }
}
