#!/usr/bin/env bash
# Runs the whole test suite under ThreadSanitizer in its own scratch path (.build-tsan). It compiles with
# -DUSER_SESSIONS_TSAN, so `Locked` (the package's one lock, Sources/UserSessions/Support/Locked.swift) locks a pthread
# mutex, which TSan intercepts, instead of Synchronization.Mutex, whose futex calls it cannot see. The suppressions
# file (Scripts/tsan-suppressions.txt) names no type of this package or its tests. Any race report makes the test
# process exit non-zero, and this script with it. Extra arguments go to `swift test` (e.g. --filter X).
#
# The reports are printed again at the end, after the test log, so that the tail of a CI log shows them (each with
# its first stack frames and the test that was running).
set -euo pipefail
cd "$(dirname "$0")/.."
export TSAN_OPTIONS="suppressions=$PWD/Scripts/tsan-suppressions.txt:halt_on_error=0${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
mkdir -p .build-tsan
log=.build-tsan/tsan-test-output.txt
status=0
# Serial: under TSAN the stress tests (100,000 waiters, 10,000 users) would starve the others past their hang guards.
# Bounded (Scripts/bounded.sh) like the other test steps of .ci/run: a test that hangs fails the run after 25 minutes
# (build included; build and run take about 10 minutes here), naming the tests in flight with the process's stacks.
Scripts/bounded.sh 1500 swift test --sanitize=thread --no-parallel --scratch-path .build-tsan -Xswiftc -DUSER_SESSIONS_TSAN "$@" 2>&1 \
    | tee "$log" || status=$?
if grep -q "WARNING: ThreadSanitizer" "$log"; then
    python3 - "$log" <<'PY'
import re, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
running = "(before any test started)"
reports = 0
for index, line in enumerate(lines):
    if re.search(r"Test .* started\.$", line):
        running = line.strip()
    if "WARNING: ThreadSanitizer" in line:
        reports += 1
        print(f"\n--- ThreadSanitizer report {reports}, last test started before it: {running}")
        end = index
        while end < len(lines) and not lines[end].startswith("SUMMARY: ThreadSanitizer"):
            end += 1
        body = lines[index:end + 1]
        print("\n".join(body[:60] + (["    …"] if len(body) > 60 else [])))
print(f"\n{reports} ThreadSanitizer report(s), repeated above from {sys.argv[1]}")
PY
    exit 1
fi
exit "$status"
