#!/usr/bin/env bash
# Smoke test of the Hummingbird example at the HTTP level (curl): builds it, starts the OpenID Connect provider
# fixture and the example (in-memory stores) on free 127.0.0.1 ports with the documented command line, checks how a
# signed-out client is answered, sends SIGTERM and checks a clean exit (status 0) within 30 s. Traffic stays on
# loopback. The signed-in flows are exercised in a real browser by Scripts/browser-tests.sh.
#
#   Examples/HummingbirdServer/smoke.sh            (scratch path: Examples/HummingbirdServer/.build)
#   SCRATCH_PATH=/some/dir Examples/HummingbirdServer/smoke.sh
#
# Checks: /auth/user is a 401 JSON; a navigation to / is a 302 to /auth/login?returnTo=%2F, an API request to / a
# 401 JSON; /auth/login is a 302 to the provider's /authorize with response_type=code, the client id, the
# callback URL, state, nonce and an S256 code challenge (fresh state and nonce on each call); POST /auth/logout from
# another site (Origin or Sec-Fetch-Site) is 403; /upstream/profile without a session is 401 and without X-CSRF is
# refused; an `X-User-ID` header (the old example's identity) and a forged cookie authenticate nobody; a garbage
# back-channel logout token is refused; no JWT reaches the log; SIGTERM ends the server with status 0.
#
# Examples/VaporServer/smoke.sh runs these same checks against the Vapor example, which it builds itself: it passes
# its directory as EXAMPLE_DIR and its built executable as EXAMPLE_SERVER.
set -euo pipefail
cd "${EXAMPLE_DIR:-$(dirname "$0")}"
example="$PWD"
fixture="$example/../../Tests/UserSessionsOpenIDConnectTests/Fixtures/oidc_provider.py"
scratch="${SCRATCH_PATH:-.build}"

if [ -n "${EXAMPLE_SERVER:-}" ]; then
    server="$EXAMPLE_SERVER"
else
    swift build --scratch-path "$scratch" --product HummingbirdServer
    server="$(swift build --scratch-path "$scratch" --show-bin-path)/HummingbirdServer"
fi

work="$(mktemp -d)"
pid=""
provider_pid=""
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    exec 3>&- # the provider fixture exits when its stdin closes
    if [ -n "$provider_pid" ]; then
        for _ in $(seq 1 50); do kill -0 "$provider_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$provider_pid" 2>/dev/null || true
        wait "$provider_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "smoke: FAILED: $*" >&2
    echo "--- server log ---" >&2
    cat "$work/log" "$work/out" >&2 || true
    echo "--- provider log ---" >&2
    cat "$work/provider.log" >&2 || true
    exit 1
}

if grep -rn "X-User-ID" "$example/Sources"; then fail "the example still reads X-User-ID"; fi

# The provider prints its port first; it lives as long as file descriptor 3 (its stdin) stays open.
mkfifo "$work/provider.in"
python3 "$fixture" <"$work/provider.in" >"$work/provider.out" 2>"$work/provider.log" &
provider_pid=$!
exec 3>"$work/provider.in"
for _ in $(seq 1 600); do
    [ -s "$work/provider.out" ] && break
    kill -0 "$provider_pid" 2>/dev/null || fail "the provider fixture exited"
    sleep 0.1
done
op_port="$(head -n 1 "$work/provider.out")"
[ -n "$op_port" ] || fail "the provider fixture printed no port"
issuer="http://127.0.0.1:$op_port"

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"
"$server" serve --port "$port" --issuer "$issuer" --client-id example-app --client-secret example-secret \
    --public-url "$base" --upstream "$issuer/api" >"$work/out" 2>"$work/log" &
pid=$!
for _ in $(seq 1 600); do
    grep -q "listening on $base" "$work/out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || fail "the server exited before listening"
    sleep 0.1
done
grep -q "listening on $base" "$work/out" || fail "no 'listening on $base' line within 60 s"

# request METHOD PATH CURL-ARGUMENTS... : sets $status, $headers (file) and $body (file)
request() {
    local method="$1" path="$2"
    shift 2
    status="$(curl -s -X "$method" -o "$work/body" -D "$work/headers" -w '%{http_code}' --max-time 30 --noproxy '*' \
        "$@" "$base$path")" || true
}
# expect STATUS DESCRIPTION METHOD PATH CURL-ARGUMENTS...
expect() {
    local wanted="$1" what="$2"
    shift 2
    request "$@"
    [ "$status" = "$wanted" ] || fail "$what: HTTP $status, expected $wanted ($(head -c 300 "$work/body"))"
    echo "smoke: $what -> $status"
}
header() { # the value of response header $1 (case-insensitive), without the line end
    grep -i "^$1:" "$work/headers" | head -n 1 | cut -d: -f2- | sed 's/^ *//' | tr -d '\r'
}
json_body() {
    python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$work/body" 2>/dev/null ||
        fail "$1: the body is not JSON: $(head -c 300 "$work/body")"
    header Content-Type | grep -qi "application/json" || fail "$1: Content-Type $(header Content-Type)"
}

expect 401 "GET /auth/user signed out" GET /auth/user
json_body "/auth/user"
expect 302 "a navigation to / signed out" GET / -H "Accept: text/html,application/xhtml+xml"
location="$(header Location)"
[ "${location#"$base"}" = "/auth/login?returnTo=%2F" ] || fail "/ redirects to $location"
expect 401 "an API request to / signed out" GET / -H "Accept: application/json"
json_body "GET / as an API request"

expect 302 "GET /auth/login" GET "/auth/login?returnTo=%2F"
first="$(header Location)"
python3 - "$first" "$issuer" "$base" <<'PY' || fail "the sign-in redirect: $first"
import sys
from urllib.parse import parse_qs, urlsplit
location, issuer, base = sys.argv[1:]
parts = urlsplit(location)
query = {k: v[0] for k, v in parse_qs(parts.query).items()}
assert f"{parts.scheme}://{parts.netloc}{parts.path}" == issuer + "/authorize", f"not the provider's /authorize"
assert query.get("response_type") == "code", query.get("response_type")
assert query.get("client_id") == "example-app", query.get("client_id")
assert query.get("redirect_uri") == base + "/auth/callback", query.get("redirect_uri")
assert "openid" in query.get("scope", "").split(), query.get("scope")
assert len(query.get("state", "")) >= 16, "no state of at least 16 characters"
assert len(query.get("nonce", "")) >= 16, "no nonce of at least 16 characters"
assert len(query.get("code_challenge", "")) == 43, "no S256 code challenge (43 base64url characters)"
assert query.get("code_challenge_method") == "S256", query.get("code_challenge_method")
PY
expect 302 "GET /auth/login again" GET "/auth/login?returnTo=https%3A%2F%2Fevil.example%2F"
second="$(header Location)"
python3 - "$first" "$second" <<'PY' || fail "two sign-ins share state, nonce or code challenge"
import sys
from urllib.parse import parse_qs, urlsplit
first, second = ({k: v[0] for k, v in parse_qs(urlsplit(u).query).items()} for u in sys.argv[1:])
for key in ("state", "nonce", "code_challenge"):
    assert first[key] != second[key], key
PY
echo "smoke: /auth/login -> the provider's /authorize with state, nonce and an S256 code challenge, fresh each time"

expect 403 "POST /auth/logout with a cross-site Origin" POST /auth/logout -H "Origin: http://evil.example"
expect 403 "POST /auth/logout with Sec-Fetch-Site: cross-site" POST /auth/logout -H "Sec-Fetch-Site: cross-site"
expect 401 "GET /upstream/profile signed out" GET /upstream/profile -H "X-CSRF: 1"
json_body "/upstream/profile signed out"
request GET /upstream/profile
[ "$status" = 401 ] || [ "$status" = 403 ] || fail "GET /upstream/profile without X-CSRF: HTTP $status"
echo "smoke: GET /upstream/profile without X-CSRF -> $status"
expect 401 "X-User-ID: alice on /auth/user" GET /auth/user -H "X-User-ID: alice"
expect 401 "X-User-ID: alice on /upstream/profile" GET /upstream/profile -H "X-User-ID: alice" -H "X-CSRF: 1"
expect 302 "X-User-ID: alice on a navigation to /" GET / -H "X-User-ID: alice" -H "Accept: text/html"
forged="user_session=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
expect 401 "a forged session cookie" GET /auth/user -H "Cookie: $forged"
request POST /auth/backchannel-logout --data-urlencode "logout_token=eyJhbGciOiJub25lIn0.e30."
[ "${status:0:1}" = 4 ] || fail "a forged back-channel logout token: HTTP $status, expected 4xx"
echo "smoke: a forged back-channel logout token -> $status"
expect 200 "GET /signed-out (public)" GET /signed-out
grep -q 'id="signed-out"' "$work/body" || fail "/signed-out has no id=\"signed-out\""

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
if grep -Eq "eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}" "$work/log" "$work/out"; then fail "a JWT reached the log"; fi
echo "smoke: SIGTERM -> clean exit (status 0)"
echo "smoke: passed"
