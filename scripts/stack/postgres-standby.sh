# postgres-standby.sh: PG_NODES=2, a hot standby beside postgres.sh's server, sourced by
# postgres.sh after its own definitions (only definitions here; standby_main runs).
#
#   PG_NODES=2 scripts/stack/postgres.sh start    the server as without PG_NODES, then its standby
#   PG_NODES=2 scripts/stack/postgres.sh status   each node's port and role
#   PG_NODES=2 scripts/stack/postgres.sh promote  stop the primary if it runs, promote the standby
#   PG_NODES=2 scripts/stack/postgres.sh rebuild  make the node that is not the primary its standby again
#   PG_NODES=2 scripts/stack/postgres.sh url      the multi-host admin URL that follows the primary
#   PG_NODES=2 scripts/stack/postgres.sh stop     stop both nodes
#   PG_NODES=2 scripts/stack/postgres.sh destroy  stop both and delete the standby's data
#
# Node 1 is postgres.sh's server (PGSTACK_PORT, its data directory); node 2 listens on
# PGSTACK_STANDBY_PORT with its data beside node 1's. Which one is the primary changes
# with promote: clients use the URL of `url`, which lists both, and pgx keeps the one
# that accepts writes (target_session_attrs=read-write).
#
# The standby is a base backup of the primary (pg_basebackup -R) streaming through the
# physical slot "standby", which keeps on the primary the WAL the standby has not
# received. Replication is synchronous: the primary waits at each commit until the
# standby has flushed it, so a commit a client saw succeed survives the loss of the
# primary. The primary waits for the standby by name (synchronous_standby_names =
# '"standby"', the application_name the standby connects with): '*' would match any
# walsender, the CDC relay's logical replication connection too, and a commit could
# then be acknowledged on the relay's feedback while the standby lags behind. The cost
# is a network round trip per commit, and a primary whose standby is down stops
# committing: promote therefore turns the wait off on the new primary, which has no
# standby until rebuild gives it one and turns it back on. Rebuild takes a fresh base
# backup rather than pg_rewind, which needs wal_log_hints or data checksums that the
# data directory of postgres.sh has not got.
#
# A standby is only added to a primary this checkout started: synchronous replication
# changes how every commit of the server behaves, for every checkout that uses it.

STANDBY_PORT="$PGSTACK_STANDBY_PORT"
STANDBY_DATA="$DATA-standby"
STANDBY_SLOT=standby
STANDBY_NAME=standby

node_port() { if [[ $1 == 1 ]]; then echo "$PORT"; else echo "$STANDBY_PORT"; fi; }
node_data() { if [[ $1 == 1 ]]; then echo "$DATA"; else echo "$STANDBY_DATA"; fi; }
peer() { echo $((3 - $1)); }

# node_sql runs SQL on node $1 and prints the unaligned result.
node_sql() {
	PGCONNECT_TIMEOUT=3 timeout 30 "$PSQL" -X -q -w -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(node_port "$1")" -U postgres -d postgres -c "$2"
}

# node_role prints primary, standby or down.
node_role() {
	local r
	r="$(node_sql "$1" "SELECT pg_is_in_recovery()" 2>/dev/null)" || { echo down; return; }
	if [[ "$r" == t ]]; then echo standby; else echo primary; fi
}

# node_ctl runs pg_ctl on node $1 with the options postgres.sh starts its server with.
node_ctl() {
	local n=$1
	shift
	as_owner "$BIN/pg_ctl" -D "$(node_data "$n")" -l "$(node_data "$n")/server.log" \
		-o "$SERVER_OPTIONS -c port=$(node_port "$n") -c payments_outbox.owner='$ROOT'" "$@"
}

# primary_node prints the node that answers as the primary, or fails.
primary_node() {
	local n
	for n in 1 2; do
		if [[ "$(node_role "$n")" == primary ]]; then echo "$n"; return; fi
	done
	return 1
}

# build_standby makes node $1 a new standby of node $2: a fresh base backup through the
# slot, a start, then synchronous replication on the primary, turned on only now so that
# the standby's copy of the configuration does not wait for a standby of its own. -R
# writes the connection's application_name into primary_conninfo, so either node, once
# rebuilt, connects as $STANDBY_NAME.
build_standby() {
	local n=$1 p=$2 data
	data="$(node_data "$n")"
	node_sql "$p" "SELECT pg_create_physical_replication_slot('$STANDBY_SLOT') WHERE NOT EXISTS
		(SELECT 1 FROM pg_replication_slots WHERE slot_name = '$STANDBY_SLOT')" >/dev/null
	rm -rf "$data"
	mkdir -p "$data"
	[[ "$(id -u)" == 0 ]] && chown postgres:postgres "$data"
	chmod 700 "$data"
	as_owner "$BIN/pg_basebackup" -h 127.0.0.1 -p "$(node_port "$p")" -U postgres -D "$data" \
		-d "application_name=$STANDBY_NAME" -X stream -S "$STANDBY_SLOT" -R -c fast \
		>"$STATE/postgres-basebackup.log" 2>&1 ||
		{ cat "$STATE/postgres-basebackup.log" >&2; exit 1; }
	node_ctl "$n" -w -t 60 start >/dev/null 2>&1 9>&- || { tail -n 30 "$data/server.log" >&2; exit 1; }
	node_sql "$p" "ALTER SYSTEM SET synchronous_standby_names = '\"$STANDBY_NAME\"'" >/dev/null
	node_sql "$p" "SELECT pg_reload_conf()" >/dev/null
	local deadline=$((SECONDS + 30))
	until [[ "$(node_sql "$p" "SELECT string_agg(application_name, ',') FROM pg_stat_replication WHERE sync_state = 'sync'" 2>/dev/null)" == "$STANDBY_NAME" ]]; do
		((SECONDS < deadline)) || { echo "postgres.sh: the standby on $(node_port "$n") is not the synchronous standby ($STANDBY_NAME) after 30s" >&2; exit 1; }
		sleep 0.2
	done
	echo "postgres: standby of 127.0.0.1:$(node_port "$p") listening on 127.0.0.1:$(node_port "$n") (synchronous)"
}

# refuse_second_primary stops a start of node 1 while node 2 is the primary: node 1,
# the old primary, would start as a second server accepting writes. Plain postgres.sh
# start checks it too.
refuse_second_primary() {
	[[ -d "$STANDBY_DATA" && ! -f "$DATA/standby.signal" && "$(node_role 2)" == primary ]] || return 0
	echo "postgres.sh: 127.0.0.1:$STANDBY_PORT is the primary since a promotion; $DATA would start as a second one." >&2
	echo "Make it the new primary's standby instead: PG_NODES=2 $0 rebuild" >&2
	exit 1
}

standby_start() {
	if [[ "$(node_role 1)" == down ]]; then refuse_second_primary; fi
	start
	[[ -z "${DATABASE_URL:-}" ]] || return 0
	local by p n
	if ! by="$(owner)" || [[ "$by" != "$ROOT" ]]; then
		echo "postgres.sh: the server on 127.0.0.1:$PORT was started from ${by:-another checkout}: a standby is added only from the checkout that started it" >&2
		exit 1
	fi
	exec 9>"$LOCK"
	flock -w 180 9 || { echo "postgres.sh: another start holds $LOCK" >&2; exit 1; }
	p="$(primary_node)" || { echo "postgres.sh: neither node answers as the primary: run 'PG_NODES=2 $0 promote' or 'rebuild'" >&2; exit 1; }
	n="$(peer "$p")"
	if [[ "$(node_role "$n")" != down ]]; then
		echo "postgres: standby already running on 127.0.0.1:$(node_port "$n")"
	elif [[ -f "$(node_data "$n")/standby.signal" ]]; then
		require_free "$(node_port "$n")" PGSTACK_STANDBY_PORT "PostgreSQL standby"
		node_ctl "$n" -w -t 60 start >/dev/null 2>&1 9>&- || { tail -n 30 "$(node_data "$n")/server.log" >&2; exit 1; }
		echo "postgres: standby started on 127.0.0.1:$(node_port "$n")"
	else
		require_free "$(node_port "$n")" PGSTACK_STANDBY_PORT "PostgreSQL standby"
		build_standby "$n" "$p"
	fi
}

# standby_promote promotes the standby. A primary still running is stopped first (fast:
# its last WAL reaches the standby before it exits), so that there are never two
# servers accepting writes. The new primary stops waiting for a standby it has not got.
standby_promote() {
	local s=
	for n in 1 2; do
		if [[ "$(node_role "$n")" == standby ]]; then s=$n; fi
	done
	[[ -n "$s" ]] || { echo "postgres.sh: no node answers as a standby" >&2; exit 1; }
	if [[ "$(node_role "$(peer "$s")")" == primary ]]; then
		node_ctl "$(peer "$s")" -m fast -w -t 60 stop >/dev/null
		echo "postgres: stopped the primary on 127.0.0.1:$(node_port "$(peer "$s")")"
	fi
	node_ctl "$s" -w -t 60 promote >/dev/null
	node_sql "$s" "ALTER SYSTEM SET synchronous_standby_names = ''" >/dev/null
	node_sql "$s" "SELECT pg_reload_conf()" >/dev/null
	echo "postgres: promoted 127.0.0.1:$(node_port "$s") to primary (commits do not wait for a standby until 'PG_NODES=2 $0 rebuild')"
}

# standby_rebuild turns the node that is not the primary (the old primary, after a
# promotion) into the primary's standby, from a fresh base backup.
standby_rebuild() {
	local p n
	p="$(primary_node)" || { echo "postgres.sh: neither node answers as the primary" >&2; exit 1; }
	n="$(peer "$p")"
	if [[ -f "$(node_data "$n")/postmaster.pid" ]]; then
		node_ctl "$n" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
	fi
	build_standby "$n" "$p"
}

standby_status() {
	local n rc=0 role
	for n in 1 2; do
		role="$(node_role "$n")"
		echo "postgres: node $n on 127.0.0.1:$(node_port "$n"): $role"
		[[ "$role" != down ]] || rc=1
	done
	return "$rc"
}

# stop_standby stops node 2 if it runs: postgres.sh stop (and destroy) without
# PG_NODES=2 must not leave this checkout's standby running behind.
stop_standby() {
	if [[ -f "$STANDBY_DATA/postmaster.pid" ]]; then
		node_ctl 2 -m fast -w -t 30 stop >/dev/null || true
		echo "postgres: standby stopped"
	fi
}

standby_main() {
	case "${1:-}" in
	start) standby_start ;;
	status) standby_status ;;
	promote) standby_promote ;;
	rebuild) standby_rebuild ;;
	url) echo "postgres://postgres@127.0.0.1:$PORT,127.0.0.1:$STANDBY_PORT/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2" ;;
	stop)
		local n
		for n in 1 2; do
			if [[ -f "$(node_data "$n")/postmaster.pid" ]]; then node_ctl "$n" -m fast -w -t 30 stop >/dev/null || true; fi
		done
		echo "postgres: both nodes stopped"
		;;
	destroy)
		standby_main stop
		rm -rf "$DATA" "$STANDBY_DATA"
		;;
	*)
		echo "usage: PG_NODES=2 $0 start|status|promote|rebuild|url|stop|destroy" >&2
		exit 2
		;;
	esac
}
