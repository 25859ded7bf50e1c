#!/usr/bin/env bash
# Builds the UserSessions symbol graph (scratch path .build-docs), converts the DocC catalog with `docc` (no plugin,
# nothing fetched), fails on any DocC warning, and checks that every public symbol is in a topic group
# (Scripts/docs/curation.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
scratch=.build-docs
swift build --target UserSessions --scratch-path "$scratch" \
    -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc "$PWD/$scratch/sg" >/dev/null
rm -rf "$scratch/UserSessions.doccarchive"
output=$(docc convert Sources/UserSessions/Docs.docc --additional-symbol-graph-dir "$scratch/sg" \
    --output-dir "$scratch/UserSessions.doccarchive" --fallback-display-name UserSessions \
    --fallback-bundle-identifier UserSessions 2>&1)
if grep -qE "(warning|error):" <<<"$output"; then
    echo "$output" >&2
    echo "DocC reported warnings" >&2
    exit 1
fi
python3 Scripts/docs/curation.py "$scratch/sg" "$scratch/UserSessions.doccarchive"
