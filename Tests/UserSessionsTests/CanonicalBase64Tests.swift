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

    /// Against Foundation's reading plus the check of the unused bits, over every text of up to 4 characters drawn
    /// from a few letters, the padding and a stranger, and random texts of up to 64.
    @Test func itReadsWhatFoundationReadsInTheCanonicalSpellingOnly() {
        func expected(_ text: [UInt8]) -> Data? {
            guard let data = Data(base64Encoded: Data(text)) else { return nil }
            // Canonical when encoding the bytes again gives the text back.
            return data.base64EncodedString().utf8.elementsEqual(text) ? data : nil
        }
        let symbols = Array("AQgw/+=\n-".utf8)
        var texts: [[UInt8]] = [[]]
        for length in 1...4 {
            texts += texts.filter { $0.count == length - 1 }.flatMap { text in symbols.map { text + [$0] } }
        }
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        for _ in 0..<2_000 {
            let bytes = (0..<Int.random(in: 0...48, using: &generator)).map { _ in
                UInt8.random(in: 0...255, using: &generator)
            }
            var text = Array(Data(bytes).base64EncodedString().utf8)
            if !text.isEmpty, Bool.random(using: &generator) {
                text[Int.random(in: 0..<text.count, using: &generator)] =
                    alphabet[Int.random(in: 0..<64, using: &generator)]
            }
            texts.append(text)
        }
        for text in texts {
            #expect(CanonicalBase64.decode(text) == expected(text), "\(String(decoding: text, as: UTF8.self))")
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
