#!/usr/bin/env bash
# Every continuation of this package and its tests is handed over through `Handoff`
# (Sources/UserSessions/Support/Handoff.swift): awaited with `withVisible…Continuation` and resumed with
# `resumeVisibly(…)`, so ThreadSanitizer sees the hand-over (Scripts/tsan.sh). This check fails on any other way
# to await or resume one, outside Handoff.swift itself. (The benchmark's floors and idioms are left raw on purpose:
# they measure what the standard library's continuations cost.)
set -euo pipefail
cd "$(dirname "$0")/.."

awaiting='\bwith(Checked|Unsafe)(Throwing)?Continuation\b'
# A labelled resume, or a bare one (URLSession's `task.resume()` starts a download: not a continuation).
resuming='\.resume\((returning|throwing|with):|\.resume\(\)|\.resume\($'
found=$(grep -rnE "$awaiting|$resuming" --include='*.swift' Sources Tests \
    | grep -v '^Sources/UserSessions/Support/Handoff.swift:' | grep -v 'task\.resume()' || true)
if [ -n "$found" ]; then
    echo "continuations must go through Handoff (withVisible…Continuation, resumeVisibly):" >&2
    echo "$found" >&2
    exit 1
fi
echo "every continuation goes through Handoff"
