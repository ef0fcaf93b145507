#!/usr/bin/env bash
# postgres.sh: a throwaway PostgreSQL cluster owned by this project.
#
#   scripts/stack/postgres.sh start    initdb (first time) and start on 127.0.0.1:55432
#   scripts/stack/postgres.sh stop     fast shutdown
#   scripts/stack/postgres.sh status   exit 0 if it answers
#   scripts/stack/postgres.sh url      print the admin URL
#   scripts/stack/postgres.sh restart  fast restart (used by the db-restart chaos scenario)
#   scripts/stack/postgres.sh destroy  stop and delete the cluster
#
# It uses the installed server binaries that bindir finds. When DATABASE_URL is set,
# the project uses that server instead and this script does nothing on start.
# Authentication is "trust" on loopback only: this cluster is for tests and demos.
#
# A server that another checkout started on the port is used as is by start and status,
# never stopped from here; restart is handed to the script of the checkout that owns it.
set -euo pipefail

NAME=PostgreSQL
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PORT="${PGSTACK_PORT:-55432}"
LOCK="$STATE/postgres.lock"
URL="postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"

# Settings that take effect only when the server starts, passed on every start (and
# restart) rather than written to postgresql.conf, which is written once at initdb and
# would miss data directories that already exist. deploy/docker-compose.yml passes the same
# options (deploy/compose_test.go checks it).
#   shared_preload_libraries=pg_stat_statements: the per-statement figures of
#     `go run ./cmd/bench relay -statements` (docs/bench.md).
#   wal_level=logical: the CDC relay (RELAY_MODE=cdc) reads the outbox inserts from a
#     logical replication slot, which the default wal_level=replica cannot serve.
SERVER_OPTIONS="-c shared_preload_libraries=pg_stat_statements -c wal_level=logical"

# bindir finds the server as scripts/setup.sh does (PG_BIN, pg_config, the usual places;
# majors 14 to 17), so that the server started is the one set-up accepted.
bindir() {
	source "$ROOT/scripts/stack/pgbin.sh"
	if pg_find; then echo "$PG_FOUND_BIN"; return; fi
	echo "postgres.sh: no PostgreSQL server of a major from $PG_MIN to $PG_MAX found${PG_REFUSED:+ (refused: $PG_REFUSED)}: set PG_BIN, or run make setup-chaos" >&2
	exit 1
}

BIN="$(bindir)"

# PostgreSQL refuses to run as root, and CI runs as root: run the server as the
# unprivileged "postgres" user (created by the Debian server package) in that case.
as_owner() {
	if [[ "$(id -u)" == 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# The data directory lives in the repo's .stack/ unless the postgres user cannot
# reach it (a checkout under a private home directory); then it lives in /tmp.
datadir() {
	local dir="$STATE/postgres"
	mkdir -p "$STATE"
	if [[ "$(id -u)" == 0 ]] && ! runuser -u postgres -- test -x "$STATE"; then
		dir="/tmp/payments-outbox-pg-$(echo "$ROOT" | md5sum | cut -c1-8)"
	fi
	echo "$dir"
}

DATA="$(datadir)"

running() {
	"$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U postgres >/dev/null 2>&1
}

# ours succeeds when a live server runs on this checkout's data directory: the first line
# of postmaster.pid is the postmaster's pid, and the file is left behind by a crash.
ours() {
	local p
	p="$(head -n 1 "$DATA/postmaster.pid" 2>/dev/null)" && [[ -n "$p" && -d "/proc/$p" ]]
}

# shared succeeds when the server answering on $PORT was started elsewhere (another
# checkout): this checkout uses it, and never stops it.
shared() { running && ! ours; }

start() {
	if [[ -n "${DATABASE_URL:-}" ]]; then
		echo "postgres: DATABASE_URL is set, using that server; nothing to start"
		return
	fi
	mkdir -p "$STATE"
	exec 9>"$LOCK"
	flock -w 180 9 || { echo "postgres.sh: another start holds $LOCK" >&2; exit 1; }
	if ours && running; then
		echo "postgres: already running at $URL"
		return
	fi
	if shared; then
		print_shared "$PORT"
		echo "postgres: using it at $URL"
		return
	fi
	if [[ ! -f "$DATA/PG_VERSION" ]]; then
		mkdir -p "$DATA"
		[[ "$(id -u)" == 0 ]] && chown postgres:postgres "$DATA"
		chmod 700 "$DATA"
		as_owner "$BIN/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$STATE/postgres-initdb.log" 2>&1 ||
			{ cat "$STATE/postgres-initdb.log" >&2; exit 1; }
		cat >>"$DATA/postgresql.conf" <<-EOF
			# Set by scripts/stack/postgres.sh
			listen_addresses = '127.0.0.1'
			port = $PORT
			unix_socket_directories = ''
			max_connections = 300
			shared_buffers = 256MB
			# Tests and the chaos harness create many short-lived databases.
			max_wal_size = 2GB
		EOF
	fi
	# A crash (or SIGKILL of a test run) can leave a stale pid file; pg_ctl handles it.
	# 9>&-: the server must not inherit the lock, or it would hold it for its whole life.
	as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -o "$SERVER_OPTIONS" \
		-w -t 60 start >/dev/null 2>&1 9>&- ||
		{ tail -n 30 "$DATA/server.log" >&2; exit 1; }
	echo "postgres: listening at $URL"
	echo "postgres: stop with 'scripts/stack/postgres.sh stop' (data in $DATA)"
}

stop() {
	if shared; then
		print_shared "$PORT"
		return
	fi
	if [[ -f "$DATA/postmaster.pid" ]]; then
		as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 30 stop >/dev/null || true
	fi
	echo "postgres: stopped"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
restart)
	# The db-restart chaos scenario restarts the server whichever checkout started it:
	# only that checkout's script knows its data directory.
	if shared; then
		owner="$(owner_of "$PORT")" || { print_shared "$PORT"; echo "postgres.sh: cannot restart it from here" >&2; exit 1; }
		exec bash "$owner/scripts/stack/postgres.sh" restart
	fi
	as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -o "$SERVER_OPTIONS" -m fast -w -t 60 restart >/dev/null 2>&1
	echo "postgres: restarted at $URL"
	;;
status)
	if ! running; then echo "postgres: not running"; exit 1; fi
	echo "postgres: running at $URL"
	if ! ours; then print_shared "$PORT"; fi
	;;
url) echo "$URL" ;;
destroy)
	stop
	rm -rf "$DATA"
	;;
*)
	echo "usage: $0 start|stop|restart|status|url|destroy" >&2
	exit 2
	;;
esac
