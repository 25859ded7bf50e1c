#!/usr/bin/env bash
# Browser tests of web sessions: headless Chromium, driven by Selenium, signs in to the Hummingbird example
# (Examples/HummingbirdServer) and to the Vapor example (Examples/VaporServer) through the OpenID Connect provider
# fixture, everything on 127.0.0.1: the same scenarios against each.
#
#   Scripts/browser-tests.sh                               (both examples; scratch paths below)
#   EXAMPLES=vapor Scripts/browser-tests.sh      (the Vapor example, built in .build-traits with every trait;
#                                                 VAPOR_SCRATCH_PATH, relative to the repository's root, names another
#                                                 scratch path; VAPOR_SERVER, an executable already built, skips the
#                                                 build)
#   HUMMINGBIRD_SERVER=.build-traits/debug/HummingbirdExample VAPOR_SERVER=.build-traits/debug/VaporServer \
#       Scripts/browser-tests.sh                 (what .ci/run does: both examples as the every-trait build made
#                                                 them, the Hummingbird one as the root package's HummingbirdExample
#                                                 target; nothing is built)
#   Scripts/browser-tests.sh --only sign_in_lands_on_return_to       (arguments go to Tests/Browser/web_sessions.py)
#   BROWSER_TESTS_SCREENSHOT=docs/web-session-example.png Scripts/browser-tests.sh   (refreshes the README's picture;
#                                                            a relative path is relative to the repository's root)
#   EXAMPLE_DIR=/other/checkout/Examples/HummingbirdServer Scripts/browser-tests.sh   (another checkout's example)
#
# What it does:
# 1. Checks that its tools are there, and installs nothing: Debian's `chromium` and `chromium-driver`
#    (/usr/bin/chromedriver), Selenium from PyPI, Authlib and Flask (the provider fixture), PostgreSQL's server
#    programs. .ci/run installs them (`apt-get install -y chromium chromium-driver postgresql`,
#    `python3 -m pip install selenium authlib flask`). A missing tool is a failure, never a skip.
# 2. Builds the Hummingbird example with its own Package.swift (`swift build --product HummingbirdServer`) in
#    SCRATCH_PATH (default Examples/HummingbirdServer/.build), unless HUMMINGBIRD_SERVER names an executable already
#    built. The Vapor example is a target of the root package: it is built with every trait and the flags of CI's
#    every-trait build in VAPOR_SCRATCH_PATH (default .build-traits), unless VAPOR_SERVER names one already built.
#    Screenshots and logs of a failed run stay in SCRATCH_PATH/browser-tests/<executable>/.
# 3. Runs Tests/Browser/web_sessions.py under Scripts/with-postgres.sh (a throwaway PostgreSQL on a free port,
#    named by USER_SESSIONS_POSTGRES_URL). web_sessions.py starts the provider fixture
#    (Tests/UserSessionsOpenIDConnectTests/Fixtures/oidc_provider.py), two example instances A and B on free ports
#    sharing that database (`serve --postgres-url …`, the contract's command line), and an "attacker" site on
#    http://localhost:PORT; it then runs each scenario in a fresh headless Chromium and prints
#    `scenario NAME: passed|FAILED: …`, then `N passed, N failed`.
#
# Scenarios: sign-in through the provider's login form lands on returnTo and /auth/user shows alice (an off-site
# returnTo falls back to /); the proxied API answers with alice's data across an access-token expiry (refreshed
# server-side, same cookie); the cookie's attributes (HttpOnly, SameSite=Lax, Path=/, no Domain, not Secure on
# loopback http, opaque, replaced at sign-in) and no token anywhere in the browser; a cross-site form POST to
# /auth/logout and a proxy call without X-CSRF are refused; sign-out clears the cookie, /auth/user is 401 and the
# provider's session ends; forged logout tokens (alg none, wrong audience, no event, a nonce) are refused and one
# for another session ends nothing; a back-channel logout ends the browser's session within 1 s on the instance that
# received it and on the other one; a restart (SIGTERM, exit 0, B serves the browser meanwhile, start again) keeps
# the browser signed in; in the FAPI 2.0 mode (a provider of its own switched to FAPI 2.0, an instance started with
# --fapi-client-key), the sign-in pushes its request (the browser carries only client_id and request_uri), the proxy
# sends a DPoP-bound token with a valid proof (the upstream answers cnf.jkt) and refreshes it with a proof of the
# same key, the client authenticates with private_key_jwt; and finally no cookie value or JWT in the example's logs,
# no cookie forwarded upstream, no refresh token reused.
#
# Selenium is pointed at Debian's chromedriver and Chromium explicitly and runs with SE_OFFLINE=true, so Selenium
# Manager never downloads a browser or a driver. Chromium runs headless (--headless=new), with --no-sandbox (CI is
# root), no proxy, and a host resolver that resolves nothing but localhost and 127.0.0.1. Nothing is ordered by
# sleeping: processes are ready when they print their ready line, every other wait is a WebDriverWait on a
# condition with a timeout (the provider's /control/stats is polled). Everything started is ended on exit: the
# python runner ends its processes and browsers (also on SIGTERM), with-postgres.sh deletes its cluster, and the
# trap below ends the runner when this script is interrupted. Logs and screenshots of a failed run stay in
# SCRATCH_PATH/browser-tests/.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
scratch="${SCRATCH_PATH:-$root/Examples/HummingbirdServer/.build}"
case "$scratch" in /*) ;; *) scratch="$root/$scratch" ;; esac

missing=()
[ -x /usr/lib/chromium/chromium ] || [ -x /usr/bin/chromium ] || missing+=("Debian package chromium")
[ -x /usr/bin/chromedriver ] || missing+=("Debian package chromium-driver (/usr/bin/chromedriver)")
python3 -c "import selenium" >/dev/null 2>&1 || missing+=("python package selenium")
python3 -c "import authlib, flask, joserfc" >/dev/null 2>&1 || missing+=("python packages authlib and flask")
if [ "${#missing[@]}" -gt 0 ]; then
    printf 'browser-tests: missing: %s\n' "${missing[@]}" >&2
    echo "browser-tests: install them (.ci/run does): apt-get install -y chromium chromium-driver;" \
        "python3 -m pip install selenium authlib flask" >&2
    exit 1
fi

examples="${EXAMPLES:-hummingbird vapor}"
servers=()
for name in $examples; do
    case "$name" in
        hummingbird)
            if [ -n "${HUMMINGBIRD_SERVER:-}" ]; then
                servers+=("$(cd "$(dirname "$HUMMINGBIRD_SERVER")" && pwd)/$(basename "$HUMMINGBIRD_SERVER")")
            else
                example="${EXAMPLE_DIR:-$root/Examples/HummingbirdServer}"
                swift build --package-path "$example" --scratch-path "$scratch" --product HummingbirdServer
                bin="$(swift build --package-path "$example" --scratch-path "$scratch" --show-bin-path)"
                servers+=("$bin/HummingbirdServer")
            fi
            ;;
        vapor)
            # .ci/run's every-trait build command line, word for word (from the root, a relative scratch path), so
            # that it finds the example built; another spelling of it rebuilds everything.
            vapor_scratch="${VAPOR_SCRATCH_PATH:-.build-traits}"
            build=(swift build --build-tests --enable-all-traits --scratch-path "$vapor_scratch"
                -Xswiftc -warnings-as-errors)
            if [ -n "${VAPOR_SERVER:-}" ]; then
                servers+=("$(cd "$(dirname "$VAPOR_SERVER")" && pwd)/$(basename "$VAPOR_SERVER")")
            else
                "${build[@]}"
                servers+=("$("${build[@]}" --show-bin-path)/VaporServer")
            fi
            ;;
        *) echo "browser-tests: unknown example $name (hummingbird, vapor)" >&2; exit 2 ;;
    esac
done

screenshot=()
if [ -n "${BROWSER_TESTS_SCREENSHOT:-}" ]; then
    shot="$BROWSER_TESTS_SCREENSHOT"
    screenshot=(--screenshot "$(cd "$(dirname "$shot")" && pwd)/$(basename "$shot")")
fi

runner=""
stop_runner() {
    if [ -n "$runner" ] && kill -0 "$runner" 2>/dev/null; then
        kill -TERM -- "-$runner" 2>/dev/null || kill -TERM "$runner" 2>/dev/null || true
        wait "$runner" 2>/dev/null || true
    fi
}
trap stop_runner EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# In a session of its own (setsid), so that stop_runner can signal the runner's whole process group: with-postgres.sh
# defers its own trap until its command ends, so the python runner must get the signal too. One run per example, each
# with its own cluster; the first failure ends the script.
for server in "${servers[@]}"; do
    name="$(basename "$server")"
    echo "browser-tests: $name"
    setsid Scripts/with-postgres.sh python3 -u Tests/Browser/web_sessions.py --server "$server" \
        --artifacts "$scratch/browser-tests/$name" ${screenshot[@]+"${screenshot[@]}"} "$@" &
    runner=$!
    status=0
    wait "$runner" || status=$?
    runner=""
    [ "$status" = 0 ] || exit "$status"
done
