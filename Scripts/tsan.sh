#!/usr/bin/env bash
# Runs the whole test suite under ThreadSanitizer in its own scratch path (.build-tsan), with the suppressions for
# Synchronization.Mutex's false positives (Scripts/tsan-suppressions.txt explains them). Any other race report makes
# the test process exit non-zero, and this script with it. Extra arguments go to `swift test` (e.g. --filter X).
set -euo pipefail
cd "$(dirname "$0")/.."
export TSAN_OPTIONS="suppressions=$PWD/Scripts/tsan-suppressions.txt:halt_on_error=0${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
# Serial: under TSAN the stress tests (100,000 waiters, 10,000 users) would starve the others past their hang guards.
exec swift test --sanitize=thread --no-parallel --scratch-path .build-tsan "$@"
