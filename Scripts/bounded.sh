#!/usr/bin/env bash
# Scripts/bounded.sh SECONDS COMMAND...: runs COMMAND (a test run) so that a hang fails instead of hanging CI.
# - COMMAND runs under a pseudo-terminal (`script`), so its output is line-buffered even into a log file: a test that
#   never ends is named in the log by its "started" line with no end after it.
# - After SECONDS, every test process still running (`*PackageTests.xctest`) has the stacks of all its threads
#   printed (when gdb is installed) and is killed, then COMMAND itself; the command then fails.
# The exit status is COMMAND's. SECONDS is a bound far above the run's normal length, never a timing assertion.
set -euo pipefail

seconds=$1
shift
command -v script >/dev/null || { echo "bounded.sh needs script (util-linux)" >&2; exit 2; }

tripped=$(mktemp)
rm -f "$tripped"
trap 'rm -f "$tripped"' EXIT

script -qefc "$*" /dev/null </dev/null &
runner=$!

(
    for ((waited = 0; waited < seconds; waited++)); do
        sleep 1
        kill -0 "$runner" 2>/dev/null || exit 0
    done
    touch "$tripped"
    echo >&2
    echo "bounded.sh: '$*' did not finish within $seconds s; the tests in flight are those started above without an end" >&2
    for pid in $(pgrep -f 'PackageTests\.xctest' || true); do
        # Test processes only: their executable is the test bundle (a shell whose command line names it is not).
        case "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" in
            *PackageTests.xctest) ;;
            *) continue ;;
        esac
        echo "--- stacks of test process $pid" >&2
        if command -v gdb >/dev/null; then
            timeout 60 gdb -p "$pid" -batch -ex 'thread apply all bt 30' 2>&1 | grep -E '^(Thread|#)' | head -300 >&2 || true
        fi
        kill -KILL "$pid" 2>/dev/null || true
    done
    # Whatever else still runs (a build, the test driver) ends with the pseudo-terminal.
    sleep 5
    kill -TERM "$runner" 2>/dev/null || true
) &
watchdog=$!

status=0
wait "$runner" || status=$?
wait "$watchdog" 2>/dev/null || true
if [ -e "$tripped" ]; then exit 124; fi
exit "$status"
