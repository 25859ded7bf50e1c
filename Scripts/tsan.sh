#!/usr/bin/env bash
# Runs the whole test suite under ThreadSanitizer in its own scratch path (.build-tsan). It compiles with
# -DUSER_SESSIONS_TSAN, so `Locked` (the package's one lock, Sources/UserSessions/Support/Locked.swift) locks a pthread
# mutex, which TSan intercepts, instead of Synchronization.Mutex, whose futex calls it cannot see. The suppressions
# file (Scripts/tsan-suppressions.txt) names no type of this package or its tests. Any race report makes the test
# process exit non-zero, and this script with it. Extra arguments go to `swift test` (e.g. --filter X).
set -euo pipefail
cd "$(dirname "$0")/.."
export TSAN_OPTIONS="suppressions=$PWD/Scripts/tsan-suppressions.txt:halt_on_error=0${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
# Serial: under TSAN the stress tests (100,000 waiters, 10,000 users) would starve the others past their hang guards.
exec swift test --sanitize=thread --no-parallel --scratch-path .build-tsan -Xswiftc -DUSER_SESSIONS_TSAN "$@"
