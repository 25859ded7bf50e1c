#if canImport(Glibc)
import Glibc
#endif

/// Reads the resident set size of this process (Linux: `/proc/self/statm`).
///
/// Process-wide RSS is only a rough measure of what one workload allocates: memory that an earlier run freed is
/// reused without growing RSS. ``releaseFreeMemory()`` asks the allocator to hand free pages back first, so that
/// growth measured right after it reflects new allocations.
enum ResidentMemory {
    /// The resident set size in bytes, or `nil` where it cannot be read.
    static func bytes() -> Int? {
        #if os(Linux)
        let descriptor = open("/proc/self/statm", O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        // statm: size resident shared text lib data dt (in pages); the second field is the resident set.
        let fields = buffer[0..<count].split(separator: UInt8(ascii: " "))
        guard fields.count >= 2, let pages = Int(String(decoding: fields[1], as: UTF8.self)) else { return nil }
        return pages * sysconf(Int32(_SC_PAGESIZE))
        #else
        return nil
        #endif
    }

    /// Asks glibc's allocator to return free memory to the system (`malloc_trim(0)`), if it is available.
    static func releaseFreeMemory() {
        #if os(Linux)
        if let trim = mallocTrim { _ = trim(0) }
        #endif
    }

    #if os(Linux)
    private typealias MallocTrim = @convention(c) (Int) -> Int32
    // malloc.h is not part of the Glibc module, so look the function up at run time.
    private static let mallocTrim: MallocTrim? = {
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: MallocTrim.self)
    }()
    #endif
}
