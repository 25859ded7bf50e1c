#!/usr/bin/env bash
# Smoke test of the Vapor example at the HTTP level (curl): the Hummingbird example's smoke test
# (Examples/HummingbirdServer/smoke.sh, which says what it checks), run against this example: the same command line,
# the same answers, SIGTERM and a clean exit.
#
# The example is a target of the root package (every file behind `#if Vapor`); this builds it with every trait, with
# the flags of CI's every-trait build, so after that build (scratch path .build-traits) it only links at most.
#
# The build runs from the repository's root with the command line of .ci/run's every-trait build, word for word: a
# different command line (an absolute spelling of the scratch path, `--package-path`) made SwiftPM rebuild everything.
#
#   Examples/VaporServer/smoke.sh            (scratch path: .build-traits at the repository's root)
#   SCRATCH_PATH=.build-other Examples/VaporServer/smoke.sh      (relative to the repository's root)
#   VAPOR_SERVER=.build-traits/debug/VaporServer Examples/VaporServer/smoke.sh   (an executable already built: what
#                                                            .ci/run does, after its every-trait build)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
scratch="${SCRATCH_PATH:-.build-traits}"
if [ -n "${VAPOR_SERVER:-}" ]; then
    server="$(cd "$(dirname "$VAPOR_SERVER")" && pwd)/$(basename "$VAPOR_SERVER")"
else
    swift build --build-tests --enable-all-traits --scratch-path "$scratch" -Xswiftc -warnings-as-errors
    server="$(swift build --build-tests --enable-all-traits --scratch-path "$scratch" -Xswiftc -warnings-as-errors \
        --show-bin-path)/VaporServer"
fi
EXAMPLE_DIR="$here" EXAMPLE_SERVER="$server" exec "$here/../HummingbirdServer/smoke.sh"
