#!/usr/bin/env bash
# Smoke test of the Hummingbird example: builds it, stores three users in a temporary FileTokenStore directory,
# starts the server on a free 127.0.0.1 port, checks its answers with curl, sends SIGTERM and checks that it exits
# cleanly (status 0) within 30 s. Traffic stays on loopback.
#
#   Examples/HummingbirdServer/smoke.sh            (scratch path: Examples/HummingbirdServer/.build)
#   SCRATCH_PATH=/some/dir Examples/HummingbirdServer/smoke.sh
set -euo pipefail
cd "$(dirname "$0")"
scratch="${SCRATCH_PATH:-.build}"

swift build --scratch-path "$scratch" --product HummingbirdServer
server="$(swift build --scratch-path "$scratch" --show-bin-path)/HummingbirdServer"

work="$(mktemp -d)"
pid=""
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "smoke: FAILED: $*" >&2
    echo "--- server log ---" >&2
    cat "$work/log" >&2 || true
    exit 1
}

# alice refreshes fine; bob's refresh token was revoked (terminal); carol's authorization server is down (transient).
"$server" seed --store "$work/store" --user alice --refresh-token rt-alice
"$server" seed --store "$work/store" --user bob --refresh-token rt-revoked-bob
"$server" seed --store "$work/store" --user carol --refresh-token rt-unavailable-carol

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"
"$server" serve --port "$port" --store "$work/store" >"$work/log" 2>&1 &
pid=$!

for _ in $(seq 1 300); do
    if curl -s -o /dev/null --max-time 2 "$base/upstream/profile"; then break; fi
    kill -0 "$pid" 2>/dev/null || fail "the server exited before listening"
    sleep 0.1
done

# expect STATUS DESCRIPTION CURL-ARGUMENTS...
expect() {
    local wanted="$1" what="$2"
    shift 2
    local status
    status="$(curl -s -o "$work/body" -w '%{http_code}' --max-time 30 "$@" "$base/me")" || true
    [ "$status" = "$wanted" ] || fail "$what: HTTP $status, expected $wanted ($(cat "$work/body" 2>/dev/null))"
    echo "smoke: $what -> $status"
}
expect 200 "a stored user (restored, refreshed, upstream called)" -H "X-User-ID: alice"
grep -q "the profile of alice" "$work/body" || fail "alice's profile: $(cat "$work/body")"
expect 200 "the same user again (open session)" -H "X-User-ID: alice"
expect 401 "an unknown user" -H "X-User-ID: mallory"
expect 401 "no X-User-ID header"
expect 401 "a revoked refresh token (terminal)" -H "X-User-ID: bob"
expect 503 "an unreachable authorization server (transient)" -H "X-User-ID: carol"

kill -TERM "$pid"
status=0
for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$pid" 2>/dev/null && fail "still running 30 s after SIGTERM"
wait "$pid" || status=$?
pid=""
[ "$status" = 0 ] || fail "exit status $status after SIGTERM"
grep -q "stopped" "$work/log" || fail "no graceful stop in the log"
if grep -Eq "rt-alice~|at-[0-9]+-" "$work/log"; then fail "a token reached the log"; fi
echo "smoke: SIGTERM -> clean exit (status 0)"
echo "smoke: passed"
