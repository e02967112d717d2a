#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on this machine, for the ledger tests and for trying a ledger.
#
#   tests/cluster/postgres.sh start DIR   initdb in DIR/data, start the server, create a database
#   tests/cluster/postgres.sh stop DIR    stop the server (and leave DIR for its log)
#   export SIMREPORT_TEST_POSTGRES_URL=$(cat DIR/url)
#
# Needs Debian's (or your distribution's) postgresql. Run as root, the cluster belongs to the
# `postgres` user; run as anyone else, to that user. The server listens on a unix socket inside
# DIR only (no TCP port), with trust authentication: DIR is readable by its owner alone, so only
# root and the cluster's owner can reach it. fsync is off: the cluster is for tests, not for data.
set -Eeuo pipefail

usage() {
    echo "usage: $0 start|stop DIR" >&2
    exit 2
}
[ "$#" -eq 2 ] || usage
action=$1
dir=$2
database=${SIMREPORT_POSTGRES_DB:-simreport}

# Debian keeps the server programs out of PATH, under /usr/lib/postgresql/<major>/bin.
bindir() {
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v pg_ctl)")"
        return 0
    fi
    local found
    found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -n "$found" ] && [ -x "$found/initdb" ] || return 1
    echo "$found"
}

# Commands run as the cluster's owner: `postgres` when we are root.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

case "$action" in
start) ;;
stop)
    [ -d "$dir/data" ] || exit 0
    bin=$(bindir) || exit 0
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_owner "$bin/pg_ctl" stop -D "$dir/data" -m fast -w >/dev/null 2>&1 || true
    fi
    exit 0
    ;;
*) usage ;;
esac

bin=$(bindir) || {
    echo "PostgreSQL's initdb and pg_ctl are not installed (Debian: apt-get install postgresql)" >&2
    exit 1
}
if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    echo "there is no postgres user to own the cluster" >&2
    exit 1
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$dir"
fi
chmod 700 "$dir"
# A start that fails half-way stops what it had started.
trap '"$0" stop "$dir"' ERR

if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_owner "$bin/initdb" -D "$dir/data" --username=postgres --auth=trust --encoding=UTF8 \
        --locale=C >"$dir/initdb.log" 2>&1 || {
        echo "initdb failed; see $dir/initdb.log" >&2
        exit 1
    }
fi
as_owner "$bin/pg_ctl" status -D "$dir/data" >/dev/null 2>&1 ||
    as_owner "$bin/pg_ctl" start -D "$dir/data" -w -t 60 -l "$dir/postgres.log" \
    -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c fsync=off -c max_connections=200" \
    >/dev/null || {
    echo "PostgreSQL did not start; see $dir/postgres.log" >&2
    exit 1
}

psql=$bin/psql
[ -x "$psql" ] || psql=$(command -v psql)
if ! as_owner "$psql" -h "$dir" -U postgres -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = '$database'" | grep -q 1; then
    as_owner "$psql" -h "$dir" -U postgres -d postgres -qc "CREATE DATABASE \"$database\"" >/dev/null
fi
url="postgresql+psycopg://postgres@/$database?host=$dir"
echo "$url" >"$dir/url"
echo "PostgreSQL is up: export SIMREPORT_TEST_POSTGRES_URL='$url'"
