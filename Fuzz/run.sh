#!/usr/bin/env bash
# Builds and runs the libFuzzer targets in Fuzz/Targets.
#
# Each target is one file, Fuzz/Targets/<Name>.swift, defining `fuzz<Name>`. Every target is compiled, once, together
# with Fuzz/Dispatch.swift (the one LLVMFuzzerTestOneInput, which runs the target the environment variable
# FUZZ_TARGET names) and every library source (Sources/UserSessions/**/*.swift) into one module named UserSessions,
# so internal parsers are reachable without `@testable`, with `-sanitize=fuzzer,address`: one binary,
# .build-fuzz/fuzz (git-ignored), run once per target. Seeds live in Fuzz/Corpus/<Name>/ (committed, read-only for
# the fuzzer); new corpus entries and crashing inputs go to fuzz-out/<Name>/ (git-ignored).
#
# Usage: Fuzz/run.sh [--runs N | --seconds S | --quick] [--release] [TARGET ...]
#   --runs N      run each target for N inputs (default 1000000)
#   --seconds S   run each target for S seconds instead (libFuzzer -max_total_time)
#   --quick       CI mode: 20 seconds per target
#   --release     build with -O instead of -Onone (the run time is dominated by Foundation's JSON code either way)
#   TARGET ...    only these targets (default: all of TARGETS below)
#
# Prints the build time, then per target the executions and the crashes found; exits non-zero if any target crashed
# (its crashing input is in fuzz-out/<Name>/artifacts/; replay it with
# `FUZZ_TARGET=<Name> .build-fuzz/fuzz fuzz-out/<Name>/artifacts/crash-…`).
set -euo pipefail
cd "$(dirname "$0")/.."

# The targets. Adding one = adding Fuzz/Targets/<Name>.swift (plus seeds in Fuzz/Corpus/<Name>/) and its name here
# and in Fuzz/Dispatch.swift.
TARGETS=(
    SignInResponse     # UserSessionPrototype(signInResponse:)
    TokenFile          # FileTokenStore's file format (TokenFileCoding.decode)
    RemoteResponse     # RemoteTokenCacheProtocol.parseResponse and the token_info decoders
    OAuthTokenResponse # OAuth2TokenResponse.credentials: OAuth2TokenRefresher's token / error response parser
)

RUNS=1000000
SECONDS_PER_TARGET=""
OPTIMIZATION="-Onone"
SELECTED=()
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) RUNS="$2"; SECONDS_PER_TARGET=""; shift 2 ;;
    --seconds) SECONDS_PER_TARGET="$2"; shift 2 ;;
    --quick) SECONDS_PER_TARGET=20; shift ;;
    --release) OPTIMIZATION="-O"; shift ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) SELECTED+=("$1"); shift ;;
    esac
done
[ ${#SELECTED[@]} -gt 0 ] || SELECTED=("${TARGETS[@]}")

if ! command -v swiftc >/dev/null 2>&1 && [ -x /opt/swift/usr/bin/swiftc ]; then
    export PATH="/opt/swift/usr/bin:$PATH"
fi

BUILD_DIR=.build-fuzz
OUT_DIR=fuzz-out
mkdir -p "$BUILD_DIR" "$OUT_DIR"
mapfile -t LIBRARY_SOURCES < <(find Sources/UserSessions -name '*.swift' | sort)

# Use lld when the toolchain has it: gold prints hundreds of harmless "cannot export local symbol" warnings.
LINKER=()
if command -v ld.lld >/dev/null 2>&1; then LINKER=(-use-ld=lld); fi

for target in "${SELECTED[@]}"; do
    if [ ! -f "Fuzz/Targets/$target.swift" ]; then
        echo "no target file Fuzz/Targets/$target.swift" >&2
        exit 2
    fi
done
mapfile -t TARGET_SOURCES < <(printf 'Fuzz/Targets/%s.swift\n' "${TARGETS[@]}")
binary="$BUILD_DIR/fuzz"
printf '\n==> building every target into %s (%s)\n' "$binary" "$OPTIMIZATION"
build_start=$(date +%s)
# `-j`: the compiler's frontend jobs run on every core (one process per batch of files).
swiftc -sanitize=fuzzer,address -parse-as-library "$OPTIMIZATION" -g "${LINKER[@]}" -j "$(nproc)" \
    -module-name UserSessions -package-name swift_user_sessions "${LIBRARY_SOURCES[@]}" "${TARGET_SOURCES[@]}" \
    Fuzz/Dispatch.swift -o "$binary"
build_seconds=$(($(date +%s) - build_start))
summary=("$(printf 'build (every target) %4ss' "$build_seconds")")

status=0
for target in "${SELECTED[@]}"; do
    work="$OUT_DIR/$target"
    mkdir -p "$work/corpus" "$work/artifacts"
    seeds="Fuzz/Corpus/$target"
    mkdir -p "$seeds"
    limit=(-runs="$RUNS")
    [ -z "$SECONDS_PER_TARGET" ] || limit=(-max_total_time="$SECONDS_PER_TARGET")
    log="$work/fuzz.log"
    marker="$work/.run-start"
    touch "$marker"
    printf '==> fuzzing %s (%s)\n' "$target" "${limit[*]}"
    run_start=$(date +%s)
    # The first corpus folder receives new inputs; the committed seeds are only read. Swift's runtime keeps
    # metadata caches for the life of the process, which LeakSanitizer would report at exit: leaks are not checked.
    set +e
    FUZZ_TARGET="$target" SWIFT_BACKTRACE=enable=no ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}" "$binary" \
        "${limit[@]}" \
        -dict=Fuzz/json.dict -max_len=8192 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds" >"$log" 2>&1
    code=$?
    set -e
    run_seconds=$(($(date +%s) - run_start))
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    [ -n "$executions" ] || executions=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -1)
    crashes=$(find "$work/artifacts" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \
        -o -name 'leak-*' \) -newer "$marker" 2>/dev/null | wc -l || true)
    if [ "$code" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi
    line=$(printf '%-20s run %5ss  executions %10s  crashes %s' "$target" "$run_seconds" "${executions:-?}" \
        "$crashes")
    echo "$line"
    summary+=("$line")
    if [ "$crashes" -ne 0 ]; then
        status=1
        echo "    crashing inputs in $work/artifacts/; log: $log" >&2
        grep -m 5 -E 'ERROR|Fatal error|SUMMARY|deadly signal' "$log" >&2 || true
    fi
done

printf '\n==> fuzz summary\n'
printf '%s\n' "${summary[@]}"
exit "$status"
