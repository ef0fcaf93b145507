#!/usr/bin/env bash
# postgres.sh: a throwaway PostgreSQL cluster owned by this project.
#
#   scripts/stack/postgres.sh start    initdb (first time) and start on 127.0.0.1:$PGSTACK_PORT
#   scripts/stack/postgres.sh stop     fast shutdown
#   scripts/stack/postgres.sh status   exit 0 if this project's server answers
#   scripts/stack/postgres.sh url      print the admin URL
#   scripts/stack/postgres.sh restart  fast restart (used by the db-restart chaos scenario)
#   scripts/stack/postgres.sh destroy  stop and delete the cluster
#
# PG_NODES=2 adds a hot standby on PGSTACK_STANDBY_PORT, with promote and rebuild
# (postgres-standby.sh lists its verbs).
#
# It uses the installed server binaries that bindir finds. When DATABASE_URL is set,
# the project uses that server instead and this script does nothing on start.
# Authentication is "trust" on loopback only: this cluster is for tests and demos.
# The port is PGSTACK_PORT (default 55432, scripts/stack/ports.sh).
#
# The server carries the checkout that started it as the setting payments_outbox.owner,
# which any client can read (lib.sh, "who started a server"). A server that another
# checkout started on the port is used as is by start and status, never stopped from
# here; restart is handed to the script of the checkout that owns it. A server without
# the setting is not this project's: start fails and names PGSTACK_PORT.
set -euo pipefail

NAME=PostgreSQL
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PORT="$PGSTACK_PORT"
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
#   max_slot_wal_keep_size=4GB: a slot nobody reads (a stopped CDC relay, one left after
#     a switch back to polling) keeps every WAL segment from its position on, and the
#     default (-1) lets it fill the disk. Past 4 GB the server invalidates the slot
#     instead; the CDC relay then replaces it and publishes every pending row again.
#     At the 60 MB a stopped relay leaves per minute at 1,000 events/s (docs/bench.md,
#     "WAL the slot holds"), that is about an hour of outage, well after
#     OutboxCDCWALRetainedHigh fires at 1 GiB.
SERVER_OPTIONS="-c shared_preload_libraries=pg_stat_statements -c wal_level=logical -c max_slot_wal_keep_size=4GB"

# This stack's own options, passed with those on every start and restart: the port, so
# that PGSTACK_PORT moves a data directory that exists, and the owner record. pg_ctl
# hands -o to a shell, hence the quotes; a checkout path with a quote cannot be quoted so.
[[ "$ROOT" != *"'"* ]] || { echo "postgres.sh: the checkout's path has a quote: $ROOT" >&2; exit 1; }
STACK_OPTIONS="-c port=$PORT -c payments_outbox.owner='$ROOT'"

# bindir finds the server as scripts/setup.sh does (PG_BIN, pg_config, the usual places;
# majors 14 to 17), so that the server started is the one set-up accepted.
bindir() {
	source "$ROOT/scripts/stack/pgbin.sh"
	if pg_find; then echo "$PG_FOUND_BIN"; return; fi
	echo "postgres.sh: no PostgreSQL server of a major from $PG_MIN to $PG_MAX found${PG_REFUSED:+ (refused: $PG_REFUSED)}: set PG_BIN, or run make setup-chaos" >&2
	exit 1
}

BIN="$(bindir)"
# psql comes with the server's binaries on Debian, Homebrew and the PGDG packages; PATH's
# otherwise.
PSQL="$BIN/psql"
[[ -x "$PSQL" ]] || PSQL="$(command -v psql)" || { echo "postgres.sh: psql not found (install PostgreSQL's client)" >&2; exit 1; }

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
	"$BIN/pg_isready" -q -t 3 -h 127.0.0.1 -p "$PORT" -U postgres >/dev/null 2>&1
}

# owner prints the checkout that started the server answering on $PORT, from its
# setting payments_outbox.owner. A server started before the scripts set it has none;
# its data directory in <checkout>/.stack tells (lib.sh owner_in). Anything else on the
# port (another PostgreSQL, any listener) has no owner: it is not ours.
owner() {
	local out recorded dir
	out="$(PGCONNECT_TIMEOUT=3 timeout 10 "$PSQL" -X -q -w -At -F '|' -h 127.0.0.1 -p "$PORT" -U postgres -d postgres \
		-c "SELECT current_setting('payments_outbox.owner', true), current_setting('data_directory')" 2>/dev/null)" || return 1
	IFS='|' read -r recorded dir <<<"$out"
	if [[ -n "$recorded" ]]; then
		echo "$recorded"
		return
	fi
	[[ "$dir" == */.stack/postgres ]] || return 1
	owner_in "$dir"
}

pg_ctl_start() {
	as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -o "$SERVER_OPTIONS $STACK_OPTIONS" "$@"
}

start() {
	if [[ -n "${DATABASE_URL:-}" ]]; then
		echo "postgres: DATABASE_URL is set, using that server; nothing to start"
		return
	fi
	mkdir -p "$STATE"
	exec 9>"$LOCK"
	flock -w 180 9 || { echo "postgres.sh: another start holds $LOCK" >&2; exit 1; }
	local by
	if by="$(owner)"; then
		if [[ "$by" == "$ROOT" ]]; then
			echo "postgres: already running at $URL"
		else
			print_shared "$by"
			echo "postgres: using it at $URL"
		fi
		return
	fi
	require_free "$PORT" PGSTACK_PORT "PostgreSQL"
	refuse_second_primary
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
	pg_ctl_start -w -t 60 start >/dev/null 2>&1 9>&- ||
		{ tail -n 30 "$DATA/server.log" >&2; exit 1; }
	echo "postgres: listening at $URL"
	echo "postgres: stop with 'scripts/stack/postgres.sh stop' (data in $DATA)"
}

stop() {
	local by
	if by="$(owner)" && [[ "$by" != "$ROOT" ]]; then
		print_shared "$by"
		return
	fi
	if [[ -f "$DATA/postmaster.pid" ]]; then
		as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 30 stop >/dev/null || true
	fi
	echo "postgres: stopped"
}

# restart restarts the server on $PORT whichever checkout started it (the db-restart
# chaos scenario): only that checkout's script knows its data directory, so the restart
# is handed to it. PGSTACK_HANDED_FROM stops a hand-over from going round in circles.
# With nothing on the port, this checkout's server is started, as pg_ctl restart does.
restart() {
	local by
	if ! by="$(owner)"; then
		require_free "$PORT" PGSTACK_PORT "PostgreSQL"
		by="$ROOT"
	fi
	if [[ "$by" != "$ROOT" ]]; then
		if [[ -n "${PGSTACK_HANDED_FROM:-}" || ! -f "$by/scripts/stack/postgres.sh" ]]; then
			print_shared "$by"
			echo "postgres.sh: cannot restart it from here" >&2
			exit 1
		fi
		PGSTACK_HANDED_FROM="$ROOT" exec bash "$by/scripts/stack/postgres.sh" restart
	fi
	pg_ctl_start -m fast -w -t 60 restart >/dev/null 2>&1 ||
		{ tail -n 30 "$DATA/server.log" >&2; exit 1; }
	echo "postgres: restarted at $URL"
}

status() {
	local by
	if ! running; then
		echo "postgres: not running"
		exit 1
	fi
	if ! by="$(owner)"; then
		echo "postgres: 127.0.0.1:$PORT answers, but not as this project's PostgreSQL (move this stack's port with PGSTACK_PORT)"
		exit 1
	fi
	echo "postgres: running at $URL"
	if [[ "$by" != "$ROOT" ]]; then print_shared "$by"; fi
}

# PG_NODES=2 adds a standby, with verbs of its own (postgres-standby.sh).
source "$(dirname "${BASH_SOURCE[0]}")/postgres-standby.sh"
case "${PG_NODES:-1}" in
1) ;;
2)
	standby_main "$@"
	exit
	;;
*)
	echo "postgres.sh: PG_NODES=$PG_NODES: use 1 (the default single server) or 2 (a primary and its standby)" >&2
	exit 2
	;;
esac

case "${1:-}" in
start) start ;;
stop)
	stop
	stop_standby
	;;
restart) restart ;;
status) status ;;
url) echo "$URL" ;;
destroy)
	stop
	stop_standby
	rm -rf "$DATA" "$STANDBY_DATA"
	;;
*)
	echo "usage: $0 start|stop|restart|status|url|destroy" >&2
	exit 2
	;;
esac
