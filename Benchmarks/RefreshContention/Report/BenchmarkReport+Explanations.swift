/// What every column of every table means, and why some figures swing between repetitions. Printed under each
/// table, and the same text is in the README.
enum Explanations {
    static let general =
        "Every figure is the median of the repetitions, with their minimum and maximum in brackets. On a shared "
        + "2-core machine a repetition during which the operating system ran something else can take 2-4x as long: "
        + "read the median; a wide bracket means the machine was busy, not that the strategy is erratic."

    static let strategies: [String] =
        Strategy.allCases.map { "\($0.rawValue): \($0.peer)" } + [
            "\(FanoutWorkload.Source.bareStreams.rawValue): the floor of workload D: one AsyncStream per subscriber with "
                + "the same buffering and consumers, fed in a loop that yields the thread after each event",
            "\(BenchmarkReport.bareCredentialsName): the floor of workload E: each user's tokens and expiry in a plain "
                + "struct, in a dictionary keyed by user id",
            "floor (restore storm): the floor of workload F: per request one lookup in a [String: String] dictionary "
                + "behind a Mutex, plus one load from the same store per user by that user's first request; no "
                + "request waits for its user's load, so it is less than any correct get-or-restore",
        ]

    static let hotPath = [
        "tasks: tasks released together; the calls are split evenly between them",
        "ns/call: wall time of the whole configuration / calls (aggregate, not per task)",
        "x BareMutexRead: ns/call / BareMutexRead's ns/call at the same number of tasks",
        "swings: at 1-2 tasks a run is a few milliseconds, so one preemption or a task moving between the two "
            + "cores doubles it (a maximum 2-3x the median); with 8-64 tasks the runs are longer and steadier",
    ]

    static let contention = [
        "waiters: N callers released together, all finding the token expired",
        "refreshes: refresher calls for that one expiry (a..b when repetitions differ); 1 is correct, NaiveActor "
            + "makes one per caller",
        "wall ms: from releasing the callers until every caller has a token, the 1 ms refresher latency included",
        "overhead ns/waiter: (wall - measured refresher latency) / N: what coordinating one waiter costs",
        "RSS B/waiter: resident memory at the end of the refresh minus resident memory with every caller parked "
            + "at the start gate, / N (median). It swings (for example 0 in one run, 1,500 in another) because "
            + "resident memory grows in 4 KiB pages and only when the allocator runs out of pages freed by earlier "
            + "runs: a run that reuses freed pages shows 0, and at small N one new page is hundreds of bytes per "
            + "waiter. Trust the N >= 10,000 rows",
        "stale: callers that got the expired token back (largest count of any repetition); must be 0",
        "failed: callers whose call threw (largest count of any repetition); 0 unless a run failed",
        "swings: at N <= 100 the 1 ms sleep dominates and a late timer wake-up adds up to a millisecond; "
            + "ActorCachedTask's wake-ups grow quadratically, so its large-N runs vary most",
    ]

    static let storm = [
        "expiries: distinct tokens the refresher was asked to refresh, summed over the repetitions",
        "refreshes: refresher calls, summed; more than expiries means a token was refreshed twice (NaiveActor)",
        "calls/s: successful calls per second, all tasks together",
        "failed: calls that threw, summed. UserSessionController (default) trips its loop breaker (more than 3 "
            + "refreshes within 30 s) in its first 20 ms, as it must for tokens that live 5 ms: later calls fail "
            + "with the refresh-loop error, so its calls/s is not comparable",
        "swings: 64 tasks share 2 cores and a refresh sleeps 1 ms; how many calls fit between expiries depends on "
            + "when the tasks are scheduled, so calls/s varies up to 2-3x between repetitions",
    ]

    static let fanout = [
        "strategy: who produces the events; all read by the same consumer loop with the same buffer size",
        "subscribers: streams subscribed before the first event; events: events each subscriber receives",
        "deliveries: events received by all subscribers together (median); fewer than subscribers x events fails "
            + "the run",
        "ns/delivery: from the first event until every subscriber has drained its stream, / deliveries",
        "x AsyncStream: ns/delivery / the paced AsyncStream fan-out's at the same number of subscribers",
        "RSS B/subscriber: resident memory with every subscriber parked, minus before subscribing, / subscribers "
            + "(consumer task, stream, buffer)",
        "RSS growth B: resident growth while the events are sent: large when events pile up in buffers because the "
            + "producer runs ahead of the consumers (tight loop), small when every consumer keeps up",
        "swings: every delivery wakes a suspended task, so the figure follows how busy the 2 cores are; the first "
            + "repetition at a size also pays for growing the thread pool and the allocator",
    ]

    static let idleSessions = [
        "sessions: users opened through one UserSessionRegistry and held at once (tokens valid for an hour)",
        "heap B/session: growth of the allocator's bytes in use (glibc malloc_info) / sessions: controller, event "
            + "hub, credentials gate, the ledger's and the registry's entries; what the target reads",
        "floor B/entry: the same users' tokens and expiry as a plain struct in a [String: struct] dictionary, "
            + "measured the same way",
        "x floor: heap B/session / floor B/entry",
        "RSS B/session: resident growth / sessions, for comparison: it undercounts, since the sessions reuse memory "
            + "earlier runs freed, which stays resident; it grows in 4 KiB pages and swings by hundreds of bytes",
    ]

    static let restoreStorm = [
        "a fresh UserSessionRegistry over an in-memory store holding U users' sessions (tokens valid for an hour), "
            + "as after a restart; N tasks released together, request i for user i % U",
        "loads: store loads during the storm, counted by a wrapper around the store; restores: .opened events "
            + "(a..b when repetitions differ). Exactly U of each (one per user asked for: min(N, U)) is the invariant; "
            + "anything else exits 1",
        "wall ms: from releasing the N requests until the last has its token",
        "ns/request: wall / N; floor ns/request: the floor's wall / N (same store, N, U and start gate)",
        "x floor: ns/request / floor ns/request; overhead ns/request: (wall - floor wall) / N: what restoring "
            + "through the registry costs per request beyond one lookup and one load per user",
        "idiom ns/request: what a server author writes instead of the registry, an actor keeping [identifier: "
            + "Task<UserSessionController, Error>] whose task makes a controller and restores it from the same store "
            + "(one load and one restore per user, checked), same N, U and start gate; x idiom: ns/request / idiom "
            + "ns/request (below 1: the registry is faster)",
        "warm ns/request: the same N requests again once every session is open (session(for:) then accessToken())",
        "hot ns/call: accessToken() of the already-open controllers alone, same N tasks: the hot path at this "
            + "concurrency; compare it with workload A",
        "shutdown ns/session: registry.shutdown() afterwards, wall / sessions closed: what closing (or evicting) an idle "
            + "open session costs",
        "failed: requests that threw or got another user's token, in any pass; must be 0",
        "swings: at N = 1,000 and U = 1 a run takes a few milliseconds, where one preemption on the shared 2 cores "
            + "shows; every request wakes a parked task, which costs more than the work itself",
    ]

    static let fleet = [
        "store: the CoordinatedTokenStore the K processes share (file: one FileTokenStore directory; postgres: one "
            + "PostgresTokenStore namespace); K: processes, each this executable re-run in node mode with 64 tasks "
            + "calling accessToken() 2 ms apart; seconds: how long they call",
        "expiries: tokens that expired = distinct access tokens handed out by every process, plus the one left in "
            + "the store, minus one; refreshes: refresh-token grants the OAuth server answered; by processes: "
            + ".credentialsRefreshed events summed over the processes. refreshes = expiries = by processes, with "
            + "reuse = 0 (refresh tokens the server saw used twice) and no invalid_grant, is the invariant; "
            + "anything else exits 1",
        "adopted: rotations a process took from the store (.credentialsUpdated, adopted) instead of refreshing",
        "refresh p50/p99 ms: percentiles (nearest rank) over every process's refresh flights that refreshed, "
            + "from .refreshStarted until .credentialsRefreshed: the lease, one HTTP grant and the conditional commit, "
            + "plus at K > 1 any wait for the lease",
        "p50 x K=1: refresh p50 / the same store's p50 at K = 1: what sharing the store across processes adds",
        "adopt p50/p99 ms: the same for flights that adopted instead: a process that wanted to refresh waited for "
            + "the lease another process held across its refresh, then took the rotation from the store",
        "call p99 ms: the worst process's p99 of accessToken() latency; call max ms: the longest call of any "
            + "process. Most calls find a valid token; a token is refreshed in the background in its last 50 ms and "
            + "callers wait only in its last 20 ms",
        "calls: accessToken() calls made fleet-wide; failed: calls that threw, must be 0",
        "swings: K processes x 64 tasks share 2 cores with the OAuth server (python) and, for postgres, the "
            + "database; one run per row",
    ]

    static let fleetHotPath = [
        "accessToken() on a session opened from the store with a token valid for an hour, one task, wall / calls; "
            + "measured once the session has been open 500 ms (PostgreSQL's change listener connects in the "
            + "background and then has the session read the record once)",
        "store calls: calls through a counting wrapper around the store while the calls ran (the change feed "
            + "excepted); 0: the hot path never reads the store, whichever store it is",
    ]

    static let sealing = [
        "store: memory (InMemoryTokenStore: the cryptography and the JSON alone), file (FileTokenStore, one fsync "
            + "per write), postgres (PostgresTokenStore on the test server); plain: the store itself; sealed: a "
            + "SealedTokenStore over a second store of the same kind; one task, sequential calls over 64 identifiers",
        "save/load ns: wall / operations, median (min..max) over repetitions; +seal ns and +open ns: the median of "
            + "(sealed - plain) per repetition, what AES-256-GCM with a fresh nonce and the credentials' JSON add to "
            + "a write, and opening and decoding add to a load. Tokens: a 900-byte access token, a 66-byte refresh "
            + "token",
        "AES-GCM seal/open ns: AES-256-GCM alone on the same plaintext (the credentials' JSON, encoded before the "
            + "clock starts) with the same associated data; +seal/AES and +open/AES: what sealing and "
            + "opening add, as multiples of it (goal: at most 3)",
    ]

    static let callbackValidation = [
        "ours: OpenIDConnectClient.validateIDToken, the callback's whole check of an ID token (header, algorithm "
            + "allow-list, key chosen from the cached JWKS, signature, iss, aud, azp, exp, iat, nonce); jwt-kit: "
            + "JWTKeyCollection.verify of the same token with the key already added, the least a caller of jwt-kit "
            + "does; one task, validations one after the other; ns: median (min..max) over repetitions; x jwt-kit: "
            + "the ratio of the medians (goal: at most 1.5)"
    ]

    static let clientAssertion = [
        "ns/request: wall / requests, median (min..max) over repetitions, one task, requests one after the other",
        "token request: an ES256 client assertion: the claims' JSON, a 256-bit jti from the system generator, an "
            + "ECDSA P-256 signature and the compact serialization; what private_key_jwt adds to every token request",
        "API request: UserSessionController.authorizationHeaders(method:url:) with a fresh token, what the proxy and "
            + "withAuthorization ask for per request: for a bearer session the token's hot path and one header (the "
            + "floor); for a DPoP-bound session also a new proof (its key read back, the public JWK, a jti, ath = "
            + "SHA-256 of the token, the signature through jwt-kit)",
        "added to bearer: the proof's cost per API request, next to the milliseconds of the request itself",
    ]

    /// `lines` as an indented list under a table.
    static func render(_ lines: [String]) -> String {
        lines.map { "  - " + $0 }.joined(separator: "\n")
    }
}
