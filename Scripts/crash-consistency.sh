#!/usr/bin/env bash
# Kills the FileStoreCrashWriter helper with SIGKILL at random moments, KILLS times (default 5000; CI uses 200), and
# checks the file store after every kill (Tests/UserSessionsTests/CrashConsistencyTests.swift). Set
# USER_SESSIONS_CRASH_SEED to replay a schedule. Prints the summary line with the figures and any failures; exits
# with the test's status.
set -euo pipefail
cd "$(dirname "$0")/.."
kills="${1:-5000}"
swift build --build-tests
output=$(mktemp)
trap 'rm -f "$output"' EXIT
status=0
USER_SESSIONS_CRASH_KILLS="$kills" swift test --skip-build --filter CrashConsistencyTests >"$output" 2>&1 || status=$?
grep -E "crash consistency:|✘" "$output" || true
exit "$status"
