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

    /// The bytes glibc's allocator has handed out and not taken back, over every arena, or `nil` where that cannot
    /// be read.
    ///
    /// Unlike the resident set, it grows by what new objects take even when they reuse memory an earlier run freed
    /// (which stays resident, in the arenas of the threads that freed it): the measure for what objects kept alive
    /// cost. Read from `malloc_info`'s totals: the memory the arenas hold from the system, less their free chunks,
    /// plus the chunks mapped on their own.
    static func heapInUse() -> Int? {
        #if os(Linux)
        guard let mallocInfo else { return nil }
        var buffer: UnsafeMutablePointer<CChar>?
        var size = 0
        guard let stream = open_memstream(&buffer, &size) else { return nil }
        let status = mallocInfo(0, stream)
        fclose(stream)
        guard let buffer else { return nil }
        defer { free(buffer) }
        guard status == 0 else { return nil }
        return MallocInfo.heapInUse(String(cString: buffer))
        #else
        return nil
        #endif
    }

    #if os(Linux)
    private typealias MallocInfoFunction = @convention(c) (Int32, UnsafeMutablePointer<FILE>?) -> Int32
    private static let mallocInfo: MallocInfoFunction? = {
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "malloc_info") else { return nil }
        return unsafeBitCast(symbol, to: MallocInfoFunction.self)
    }()

    private typealias MallocTrim = @convention(c) (Int) -> Int32
    // malloc.h is not part of the Glibc module, so look the function up at run time.
    private static let mallocTrim: MallocTrim? = {
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: MallocTrim.self)
    }()
    #endif
}

/// Reads the totals of glibc's `malloc_info` document: after the last `</heap>`, one `<total>` per kind of free
/// chunk (`fast`, `rest`) and of mapped chunk (`mmap`), then `<system type="current">`.
enum MallocInfo {
    static func heapInUse(_ document: String) -> Int? {
        guard let end = document.range(of: "</heap>", options: .backwards) else { return nil }
        let totals = document[end.upperBound...]
        guard let system = size(in: totals, of: "<system type=\"current\""),
            let fast = size(in: totals, of: "<total type=\"fast\""),
            let rest = size(in: totals, of: "<total type=\"rest\""),
            let mapped = size(in: totals, of: "<total type=\"mmap\"")
        else { return nil }
        return system - fast - rest + mapped
    }

    /// The `size` attribute of the first element of `text` that starts with `start`.
    private static func size(in text: Substring, of start: String) -> Int? {
        guard let element = text.range(of: start) else { return nil }
        let rest = text[element.upperBound...]
        guard let attribute = rest.range(of: "size=\""), let close = rest[attribute.upperBound...].firstIndex(of: "\"")
        else { return nil }
        return Int(rest[attribute.upperBound..<close])
    }
}
