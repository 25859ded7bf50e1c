// FileStoreCrashWriter: saves credentials for one identifier to a FileTokenStore in a tight loop, so that a test can
// kill it (SIGKILL) at random moments and check that the store always reads back a complete old or new value.
//
// Usage: FileStoreCrashWriter DIRECTORY IDENTIFIER FIRST-COUNTER
//
// Write n carries the counter n in every field that can carry it (see `CrashConsistencyTests.expectedSession`, which
// must stay in step with `session(counter:)` below), and its size varies with n so that a torn write cannot look
// complete. After each save returns, the counter is written to standard output as one line with a single
// unbuffered write(2), so the parent knows which writes were acknowledged before the kill. A failed save prints
// the error to standard error and exits with status 1.
import Foundation
import UserSessions

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

func session(counter: UInt64, identifier: String) -> StoredSession {
    StoredSession(
        userInfo: UserInfo(id: identifier, attributes: ["counter": String(counter)]),
        credentials: Credentials(
            accessToken: "access-\(counter)-" + String(repeating: "x", count: Int(counter % 2048)),
            refreshToken: "refresh-\(counter)",
            expiresAt: Date(timeIntervalSince1970: Double(counter)),
            source: .refresh
        )
    )
}

func announce(_ line: String) {
    let bytes = Array(line.utf8)
    var offset = 0
    while offset < bytes.count {
        let written = bytes[offset...].withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress, $0.count) }
        if written < 0 {
            if errno == EINTR { continue }
            exit(3)
        }
        offset += written
    }
}

let arguments = CommandLine.arguments
guard arguments.count == 4, let first = UInt64(arguments[3]) else {
    FileHandle.standardError.write(Data("usage: FileStoreCrashWriter DIRECTORY IDENTIFIER FIRST-COUNTER\n".utf8))
    exit(2)
}
let store = FileTokenStore(directory: URL(fileURLWithPath: arguments[1], isDirectory: true))
let identifier = arguments[2]
var counter = first
while true {
    do {
        try await store.save(session(counter: counter, identifier: identifier), identifier: identifier)
    } catch {
        FileHandle.standardError.write(Data("save \(counter) failed: \(error)\n".utf8))
        exit(1)
    }
    announce("\(counter)\n")
    counter += 1
}
