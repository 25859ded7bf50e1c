import Foundation

/// The fuzzing binary's one libFuzzer entry point. `Fuzz/run.sh` compiles every target in `Fuzz/Targets/` into one
/// binary (one build of the library instead of one per target) and runs it once per target, naming the target in
/// the environment variable `FUZZ_TARGET`; a name this table does not know traps at the first input.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    FuzzTarget.selected(start, count)
}

enum FuzzTarget {
    /// Adding a target: its file in `Fuzz/Targets/`, its name here and in `Fuzz/run.sh`'s `TARGETS`.
    static let all: [String: @Sendable (UnsafeRawPointer, Int) -> CInt] = [
        "SignInResponse": fuzzSignInResponse,
        "TokenFile": fuzzTokenFile,
        "RemoteResponse": fuzzRemoteResponse,
        "OAuthTokenResponse": fuzzOAuthTokenResponse,
    ]

    /// The target `FUZZ_TARGET` names, read once.
    static let selected: @Sendable (UnsafeRawPointer, Int) -> CInt = {
        let name = ProcessInfo.processInfo.environment["FUZZ_TARGET"] ?? ""
        guard let target = all[name] else {
            fatalError("fuzz: FUZZ_TARGET names no target (\(all.keys.sorted().joined(separator: ", ")))")
        }
        return target
    }()
}
