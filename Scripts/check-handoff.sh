#!/usr/bin/env bash
# Every continuation of this package and its tests is handed over through `Handoff`
# (Sources/UserSessions/Support/Handoff.swift), so ThreadSanitizer sees the hand-over (Scripts/tsan.sh):
# - in Sources, a suspended caller is a `Parked` value (Sources/UserSessions/Support/Parked.swift), whose
#   continuation is private and resumed through Handoff only: no other file names a continuation, or awaits or
#   resumes one, so every waiting place (lanes, flights, the write turn, subscriptions, a session's waiters,
#   deadlines, I/O bridges) keeps `Parked` callers;
# - in Tests, continuations are awaited with `withVisible…Continuation` and resumed with `resumeVisibly(…)`; a test
#   file that makes no continuation of its own (no `withVisible…` call) may resume `Parked` callers.
# This check fails on anything else. (The benchmark's floors and idioms are left raw on purpose: they measure what
# the standard library's continuations cost.)
set -euo pipefail
cd "$(dirname "$0")/.."

raw_await='\bwith(Checked|Unsafe)(Throwing)?Continuation\b'
# A labelled resume, or a bare one (URLSession's `task.resume()` starts a download: not a continuation).
raw_resume='\.resume\((returning|throwing|with):|\.resume\(\)|\.resume\($'
failed=0

# Sources: only Handoff.swift and Parked.swift touch continuations.
touching="$raw_await|\\b(Checked|Unsafe)Continuation\\b|\\bwithVisible[A-Za-z]*Continuation\\b|\\bresumeVisibly\\b"
found=$(grep -rnE "$touching" --include='*.swift' Sources \
    | grep -vE '^Sources/UserSessions/Support/(Handoff|Parked)\.swift:' || true)
if [ -n "$found" ]; then
    echo "in Sources a suspended caller is a Parked value; only Handoff.swift and Parked.swift touch continuations:" >&2
    echo "$found" >&2
    failed=1
fi

# Tests: no raw await; no raw resume in a file that makes continuations of its own.
found=$(grep -rnE "$raw_await" --include='*.swift' Tests || true)
for file in $(grep -rlE "$raw_resume" --include='*.swift' Tests || true); do
    grep -qE '\bwithVisible[A-Za-z]*Continuation\b' "$file" || continue
    found+=$'\n'$(grep -nE "$raw_resume" "$file" | grep -v 'task\.resume()' | sed "s|^|$file:|" || true)
done
found=$(echo "$found" | grep -v '^$' || true)
if [ -n "$found" ]; then
    echo "continuations must go through Handoff (withVisible…Continuation, resumeVisibly):" >&2
    echo "$found" >&2
    failed=1
fi

[ "$failed" = 0 ] || exit 1
echo "every continuation goes through Handoff; in Sources, only as a Parked caller"
