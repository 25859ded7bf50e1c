#!/usr/bin/env bash
# Builds the UserSessions symbol graph (scratch path .build-docs), converts the DocC catalog with `docc` (no plugin,
# nothing fetched), fails on any DocC warning, and checks that every public symbol is in a topic group
# (Scripts/docs/curation.py).
#
# `Scripts/docs/check.sh --module UserSessionsOpenIDConnect --scratch-path .build-traits` does the same for a
# trait's module, from a build that already holds it (CI runs it after the every-trait build): its symbol graph is
# extracted from the built modules, so nothing is built again.
set -euo pipefail
cd "$(dirname "$0")/../.."
module=UserSessions
built=
while [ $# -gt 0 ]; do
    case "$1" in
        --module) module=$2; shift 2 ;;
        --scratch-path) built=$2; shift 2 ;;
        *) echo "usage: $0 [--module NAME --scratch-path BUILT]" >&2; exit 2 ;;
    esac
done
scratch=.build-docs
if [ "$module" = UserSessions ]; then
    swift build --target UserSessions --scratch-path "$scratch" \
        -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc "$PWD/$scratch/sg" >/dev/null
    graphs="$scratch/sg"
else
    [ -n "$built" ] || { echo "--module needs --scratch-path of a build that holds it" >&2; exit 2; }
    graphs="$scratch/sg-$module"
    rm -rf "$graphs" && mkdir -p "$graphs"
    triple=$(swift -print-target-info | python3 -c 'import json, sys; print(json.load(sys.stdin)["target"]["triple"])')
    # C modules of the dependencies: SwiftPM's generated module maps and the packages' own.
    maps=$(find "$built/$triple/debug" -maxdepth 3 -name module.modulemap; find "$built/checkouts" -path '*Sources*' -name module.modulemap)
    swift symbolgraph-extract -module-name "$module" -I "$built/debug/Modules" -target "$triple" \
        -minimum-access-level public -output-dir "$graphs" $(sed 's/^/-Xcc -fmodule-map-file=/' <<<"$maps")
fi
archive="$scratch/$module.doccarchive"
rm -rf "$archive"
output=$(docc convert "Sources/$module/Docs.docc" --additional-symbol-graph-dir "$graphs" \
    --output-dir "$archive" --fallback-display-name "$module" --fallback-bundle-identifier "$module" 2>&1)
if grep -qE "(warning|error):" <<<"$output"; then
    echo "$output" >&2
    echo "DocC reported warnings" >&2
    exit 1
fi
python3 Scripts/docs/curation.py "$graphs" "$archive" --module "$module"
