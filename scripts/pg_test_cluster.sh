#!/usr/bin/env bash
# Start a throwaway PostgreSQL cluster for the test suite and print its DSN.
#   eval "$(scripts/pg_test_cluster.sh start)"   -> exports GOLEM_TEST_POSTGRES_DSN
#   scripts/pg_test_cluster.sh stop DIR
#   scripts/pg_test_cluster.sh restart DIR [MODE]   pg_ctl restart (MODE: smart|fast|immediate)
#   scripts/pg_test_cluster.sh down DIR [MODE]      stop the server, keep the cluster
#   scripts/pg_test_cluster.sh up DIR               start it again (same port and options)
# (the last three are for tests that take the server away: tests/durable/store/test_postgres_chaos.py)
# PostgreSQL refuses to run as root, so the cluster runs as the `postgres` user when we are root.
set -euo pipefail
cmd=${1:-start}
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
[ -n "$bindir" ] || { echo "echo 'pg_test_cluster: PostgreSQL is not installed' >&2"; exit 0; }

as_pg() {
  if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$*"; else bash -c "$*"; fi
}

case "$cmd" in
  start)
    dir=$(mktemp -d /tmp/golem-pg.XXXXXX)
    port=${GOLEM_PG_PORT:-$(( 20000 + RANDOM % 20000 ))}
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    as_pg "$bindir/initdb -D '$dir/data' -U golem --auth=trust -E UTF8 >'$dir/initdb.log' 2>&1"
    echo "-p $port -k '$dir' -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" >"$dir/options"
    as_pg "$bindir/pg_ctl -D '$dir/data' -l '$dir/server.log' -w -o \"$(cat "$dir/options")\" start >/dev/null"
    as_pg "$bindir/createdb -h 127.0.0.1 -p $port -U golem golem_test"
    echo "export GOLEM_TEST_POSTGRES_DSN='postgresql://golem@127.0.0.1:$port/golem_test'"
    echo "export GOLEM_TEST_POSTGRES_DIR='$dir'"
    ;;
  stop)
    dir=${2:?usage: pg_test_cluster.sh stop DIR}
    as_pg "$bindir/pg_ctl -D '$dir/data' -m immediate stop >/dev/null 2>&1" || true
    rm -rf "$dir"
    ;;
  restart)
    dir=${2:?usage: pg_test_cluster.sh restart DIR [MODE]}
    as_pg "$bindir/pg_ctl -D '$dir/data' -l '$dir/server.log' -w -m ${3:-fast} restart >/dev/null"
    ;;
  down)
    dir=${2:?usage: pg_test_cluster.sh down DIR [MODE]}
    as_pg "$bindir/pg_ctl -D '$dir/data' -w -m ${3:-fast} stop >/dev/null"
    ;;
  up)
    dir=${2:?usage: pg_test_cluster.sh up DIR}
    as_pg "$bindir/pg_ctl -D '$dir/data' -l '$dir/server.log' -w -o \"$(cat "$dir/options")\" start >/dev/null"
    ;;
  *)
    echo "usage: pg_test_cluster.sh start | stop DIR | restart DIR [MODE] | down DIR [MODE] | up DIR" >&2
    exit 2
    ;;
esac
