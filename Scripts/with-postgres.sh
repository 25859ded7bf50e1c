#!/usr/bin/env bash
# Usage: Scripts/with-postgres.sh CMD [ARG…]
#
# Starts a throwaway PostgreSQL cluster, runs CMD with USER_SESSIONS_POSTGRES_URL naming it, then stops the cluster
# and deletes it, whatever way CMD (or this script) ends. Exits with CMD's status.
#
# - The cluster lives in a new temporary directory (initdb), listens on 127.0.0.1 only, on a free port, and trusts
#   connections from 127.0.0.1 (no password: nothing but this machine can reach it, and it lives for one command).
# - The URL is postgres://user_sessions@127.0.0.1:PORT/user_sessions; the user is the cluster's superuser (the
#   tests kill backends with pg_terminate_backend).
# - PostgreSQL refuses to run as root: as root, the cluster runs as the `postgres` user, which owns the directory.
# - Installs nothing: it needs PostgreSQL's server programs on PATH or in /usr/lib/postgresql/*/bin (Debian:
#   `apt-get install -y postgresql`; .ci/run does that) and python3 (to find a free port).
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 CMD [ARG…]" >&2
    exit 64
fi

bindir=""
if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    bindir="$(dirname "$(readlink -f "$(command -v initdb)")")"
else
    for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ]; then
            bindir="$candidate"
            break
        fi
    done
fi
if [ -z "$bindir" ]; then
    echo "with-postgres.sh: PostgreSQL's initdb and pg_ctl not found (install the postgresql package)" >&2
    exit 69
fi

as_owner=()
if [ "$(id -u)" -eq 0 ]; then
    if ! id postgres >/dev/null 2>&1; then
        echo "with-postgres.sh: running as root needs a 'postgres' user to run the cluster" >&2
        exit 69
    fi
    if command -v runuser >/dev/null 2>&1; then
        as_owner=(runuser -u postgres --)
    else
        as_owner=(su postgres -s /bin/sh -c '"$0" "$@"')
    fi
fi

workdir="$(mktemp -d "${TMPDIR:-/tmp}/user-sessions-pg.XXXXXX")"
started=0
cleanup() {
    status=$?
    trap - EXIT INT TERM HUP
    if [ "$started" -eq 1 ]; then
        ${as_owner[@]+"${as_owner[@]}"} "$bindir/pg_ctl" -D "$workdir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$workdir"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

if [ "${#as_owner[@]}" -gt 0 ]; then
    chown postgres "$workdir"
fi
chmod 0700 "$workdir"

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"

${as_owner[@]+"${as_owner[@]}"} "$bindir/initdb" -D "$workdir/data" -U user_sessions --auth=trust -E UTF8 --locale=C \
    --no-instructions >"$workdir/initdb.log" 2>&1 || {
    cat "$workdir/initdb.log" >&2
    exit 70
}
# Loopback only: no other address is listened on or accepted, and no Unix socket outside the directory.
cat >"$workdir/pg_hba.conf.new" <<'HBA'
local all all trust
host all all 127.0.0.1/32 trust
HBA
${as_owner[@]+"${as_owner[@]}"} cp "$workdir/pg_hba.conf.new" "$workdir/data/pg_hba.conf"

started=1
if ! ${as_owner[@]+"${as_owner[@]}"} "$bindir/pg_ctl" -D "$workdir/data" -l "$workdir/data/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $workdir -c fsync=off" start >/dev/null; then
    cat "$workdir/data/server.log" >&2 || true
    exit 70
fi
${as_owner[@]+"${as_owner[@]}"} "$bindir/psql" -q -h 127.0.0.1 -p "$port" -U user_sessions -d postgres \
    -c "CREATE DATABASE user_sessions" >/dev/null

export USER_SESSIONS_POSTGRES_URL="postgres://user_sessions@127.0.0.1:$port/user_sessions"
echo "with-postgres.sh: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') at $USER_SESSIONS_POSTGRES_URL" >&2
"$@"
