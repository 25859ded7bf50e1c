#!/usr/bin/env bash
# Builds the UserSessions symbol graph (scratch path .build-docs), converts the DocC catalog with `docc` (no plugin,
# nothing fetched), fails on any DocC warning, and checks that every public symbol is in a topic group
# (Scripts/docs/curation.py). Then the same for the catalog of UserSessionsSealing, built with the Sealing trait
# (scratch path .build-docs-sealing; it fetches and builds swift-crypto), from its own module's symbol graph only.
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

scratch=.build-docs-sealing
swift build --target UserSessionsSealing --traits Sealing --scratch-path "$scratch" \
    -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc "$PWD/$scratch/sg-all" >/dev/null
rm -rf "$scratch/sg" "$scratch/UserSessionsSealing.doccarchive"
mkdir -p "$scratch/sg"
cp "$scratch"/sg-all/UserSessionsSealing*.symbols.json "$scratch/sg/"
output=$(docc convert Sources/UserSessionsSealing/Docs.docc --additional-symbol-graph-dir "$scratch/sg" \
    --output-dir "$scratch/UserSessionsSealing.doccarchive" --fallback-display-name UserSessionsSealing \
    --fallback-bundle-identifier UserSessionsSealing 2>&1)
if grep -qE "(warning|error):" <<<"$output"; then
    echo "$output" >&2
    echo "DocC reported warnings (UserSessionsSealing)" >&2
    exit 1
fi
MODULE=UserSessionsSealing python3 Scripts/docs/curation.py "$scratch/sg" "$scratch/UserSessionsSealing.doccarchive"
