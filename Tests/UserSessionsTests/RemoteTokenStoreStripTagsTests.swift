import Foundation
import Testing

@testable import UserSessions

/// The classic endpoint runs PHP's `strip_tags` on what it stores (the fixture does the same), and a `POST` always
/// creates a record: issue 9, items 17 and 18.
struct RemoteTokenStoreStripTagsTests {
    /// Inputs and what PHP 8.2's `strip_tags` returns for them (taken from `php -r`), so the fixture is checked
    /// against the real function, not against itself.
    static let phpStripTags: [(input: String, output: String)] = [
        ("Alice <3", "Alice "), ("Bob <bob@example.com>", "Bob "), ("a <b>bold</b> c", "a bold c"),
        ("x < y", "x < y"), ("x<y", "x"), ("a > b", "a > b"), ("<", ""), (">", ">"), ("< >", "< >"),
        ("a<!-- c -->b", "ab"), ("a<? php ?>b", "ab"), ("a<!DOCTYPE x>b", "ab"), ("a<b title='>'>c", "ac"),
        ("a<b<c>>d", "ad"), ("&amp; &", "&amp; &"), ("n\u{0}ul", "nul"), ("a<\tb>c", "a<\tb>c"),
        (#"{"n":"<x>"}"#, #"{"n":""}"#), ("a<1>b", "ab"), ("it's <i>'quoted'</i>", "it's 'quoted'"),
        ("a<b \"c>d", "a"), ("q<?xml x?>r", "qr"), ("a<!--b->c-->d", "ad"), ("a<b>c<d", "ac"),
    ]

    @Test func theFixtureStripsTagsAsPHPDoes() async throws {
        try await withTokenCache { cache in
            for (index, pair) in Self.phpStripTags.enumerated() {
                try await cache.postRaw(uniqueID: "u-php\(index)", tokenInfo: pair.input)
                let stored = try await cache.rawFetch(query: "unique_id=u-php\(index)").tokenInfo ?? ""
                #expect(stored == pair.output, "\(pair.input.debugDescription)")
            }
        }
    }

    static let hostileTexts = [
        "Alice <3", "Bob <bob@example.com>", "<b>bold</b>", "<", ">", "a > b < c", "<!-- x -->", "<?php ?>",
        "&amp; & &lt;", "nul\u{0}byte", "\u{0}", "<\u{0}>", "\\u003c", "'<'\"<\"",
    ]

    static func hostileSession(_ text: String, index: Int) -> StoredSession {
        StoredSession(
            userInfo: UserInfo(
                id: "id-\(index)\(text)", email: "\(text)@example.com", name: text,
                attributes: [text: text, "plain": "x\(text)y"]),
            credentials: Credentials(
                accessToken: "at\(text)", refreshToken: "\(text)rt", tokenType: text,
                expiresAt: Date(timeIntervalSince1970: 1_900_000_000), source: .signIn,
                grantedPermissions: [text], declinedPermissions: ["d\(text)"])
        )
    }

    @Test func tagsAngleBracketsAmpersandsAndNULRoundTripThroughStripTags() async throws {
        try await withTokenCache { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            for (index, text) in Self.hostileTexts.enumerated() {
                let identifier = "user \(index) \(text.replacingOccurrences(of: "\u{0}", with: "0"))"
                let session = Self.hostileSession(text, index: index)
                try await store.save(session, identifier: identifier)
                // Nothing that strip_tags acts on left the client: no `<`, no `>`, no NUL.
                let body = try #require(try await cache.lastRequest()["body"]).uppercased()
                #expect(!body.contains("%3C") && !body.contains("%3E") && !body.contains("%00"), "\(index)")
                #expect(try await store.load(identifier: identifier) == session, "\(text.debugDescription)")
            }
        }
    }

    @Test func aCurrentIdentifierWithAngleBracketsRoundTrips() async throws {
        try await withTokenCache { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            try await store.saveCurrentIdentifier("Bob <bob@example.com>")
            #expect(try await store.loadCurrentIdentifier() == "Bob <bob@example.com>")
        }
    }

    @Test func removingAnIdentifierNeverStoredCreatesNoRecord() async throws {
        try await withTokenCache { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            try await store.remove(identifier: "never-saved")
            // The last request was the fetch; the server still has nothing (50002), not an empty record.
            #expect(try await cache.lastRequest()["method"] == "GET")
            #expect(try await cache.rawFetch(query: "unique_id=u-never-saved").errorCode == "50002")
            try await store.saveCurrentIdentifier(nil)
            #expect(try await cache.rawFetch(query: "unique_id=current-identifier").errorCode == "50002")

            // Something stored is cleared; clearing it again writes nothing more.
            try await store.save(RemoteTokenStoreTests.session(id: "u", accessToken: "t"), identifier: "u")
            try await store.remove(identifier: "u")
            #expect(try await cache.lastRequest()["body"] == "unique_id=u-u&token_info=%7B%7D")
            try await store.remove(identifier: "u")
            #expect(try await cache.lastRequest()["method"] == "GET")
            #expect(try await store.load(identifier: "u") == nil)
        }
    }

    @Test func removeLeavesAnotherIdentifiersRecordAloneButClearsACorruptOne() async throws {
        try await withTokenCache { cache in
            let store = try RemoteTokenStore(endpoint: cache.endpoint)
            let victim = String(repeating: "v", count: 300)
            let hashedKey = try IdentifierEncoding.name(for: victim).value
            let foreign = try RemoteTokenCacheProtocol.encodeSession(
                RemoteTokenStoreTests.session(id: "o", accessToken: "t"), identifier: "other")
            try await cache.postRaw(uniqueID: hashedKey, tokenInfo: foreign)
            try await store.remove(identifier: victim)
            #expect(try await cache.rawFetch(query: "unique_id=\(hashedKey)").tokenInfo == foreign)

            try await cache.postRaw(uniqueID: "u-u", tokenInfo: "not json")
            try await store.remove(identifier: "u")
            #expect(try await store.load(identifier: "u") == nil)
        }
    }
}
