#!/usr/bin/env bash
# For each DocC catalog of the package: builds the module's symbol graph, converts the catalog with `docc` (no
# plugin) from that module's symbol graph only, fails on any DocC warning, and checks that every public symbol is in
# a topic group (Scripts/docs/curation.py). UserSessions builds with default traits (scratch path .build-docs,
# nothing fetched); UserSessionsSealing with the Sealing trait (scratch path .build-docs-sealing; it fetches and
# builds swift-crypto).
set -euo pipefail
cd "$(dirname "$0")/../.."

# check_catalog MODULE SCRATCH [SWIFT BUILD ARGUMENTS…]
check_catalog() {
    local module=$1 scratch=$2
    shift 2
    swift build --target "$module" --scratch-path "$scratch" "$@" \
        -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc "$PWD/$scratch/sg-all" >/dev/null
    rm -rf "$scratch/sg" "$scratch/$module.doccarchive"
    mkdir -p "$scratch/sg"
    cp "$scratch/sg-all/$module".*symbols.json "$scratch/sg/"
    local output
    output=$(docc convert "Sources/$module/Docs.docc" --additional-symbol-graph-dir "$scratch/sg" \
        --output-dir "$scratch/$module.doccarchive" --fallback-display-name "$module" \
        --fallback-bundle-identifier "$module" 2>&1)
    if grep -qE "(warning|error):" <<<"$output"; then
        echo "$output" >&2
        echo "DocC reported warnings ($module)" >&2
        exit 1
    fi
    MODULE=$module python3 Scripts/docs/curation.py "$scratch/sg" "$scratch/$module.doccarchive"
}

check_catalog UserSessions .build-docs

# Resolving with the Sealing trait writes swift-crypto's pins into Package.resolved, and SwiftPM checks out every
# pinned package even for a build with default traits: put Package.resolved back as it was (or remove it), so that
# the default-traits steps after this one still fetch nothing.
resolved_before=$(mktemp)
if [ -f Package.resolved ]; then cp Package.resolved "$resolved_before"; else rm -f "$resolved_before"; fi
restore_resolved() {
    if [ -f "$resolved_before" ]; then mv "$resolved_before" Package.resolved; else rm -f Package.resolved; fi
}
trap restore_resolved EXIT
check_catalog UserSessionsSealing .build-docs-sealing --traits Sealing
