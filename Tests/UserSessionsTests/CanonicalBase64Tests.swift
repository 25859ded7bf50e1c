import Foundation
import Testing

@testable import UserSessions

/// Base64 is read only in its canonical spelling: every other text of the same bytes is refused.
struct CanonicalBase64Tests {
    @Test func eachLengthReadsBackAndEveryRespellingOfTheLastCharacterIsRefused() {
        for count in 0..<12 {
            let bytes = Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) })
            let standard = Array(bytes.base64EncodedString().utf8)
            #expect(CanonicalBase64.decode(standard) == bytes)
            let url = bytes.base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(CanonicalBase64.decodeURL(Array(url.utf8)) == bytes)
            // The last character before the padding, changed only in bits the bytes do not use.
            let padding = standard.reversed().prefix { $0 == UInt8(ascii: "=") }.count
            guard padding > 0 else { continue }
            let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
            let position = standard.count - 1 - padding
            guard let value = alphabet.firstIndex(of: standard[position]) else { continue }
            for unused in 1..<(padding == 1 ? 4 : 16) {
                var respelled = standard
                respelled[position] = alphabet[value | unused]
                #expect(Data(base64Encoded: Data(respelled)) == bytes)
                #expect(CanonicalBase64.decode(respelled) == nil)
            }
        }
    }

    @Test func base64URLRefusesPaddingAndTheStandardAlphabetsCharacters() {
        #expect(CanonicalBase64.decodeURL(Array("-_8".utf8)) != nil)
        #expect(CanonicalBase64.decodeURL(Array("+/8".utf8)) == nil)
        #expect(CanonicalBase64.decodeURL(Array("QQ==".utf8)) == nil)
        #expect(CanonicalBase64.decodeURL(Array("Q".utf8)) == nil)
        #expect(CanonicalBase64.decodeURL(Array("Q Q".utf8)) == nil)
        #expect(CanonicalBase64.decode(Array("not base64!".utf8)) == nil)
    }
}
