# lib.sh: what kafka.sh and toxiproxy.sh share, sourced by both. Each runs one server detached
# from its caller, with a pid file the server writes itself and a lock serializing start/stop.
# Before sourcing, the caller sets NAME (for messages); afterwards it sets LOCK, PIDFILE, LOG,
# STOP_TIMEOUT and defines log.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="$ROOT/.stack"

# server_pid prints the pid in $PIDFILE if it names a live process whose command line
# contains $1: a pid file left by a crash may name an unrelated process by now.
server_pid() {
	local p
	[[ -s "$PIDFILE" ]] || return 1
	p="$(<"$PIDFILE")"
	[[ -r "/proc/$p/cmdline" ]] || return 1
	tr '\0' ' ' <"/proc/$p/cmdline" | grep -qF -- "$1" || return 1
	echo "$p"
}

# detach runs "$@" in its own session, so that it outlives the caller's process group (a test
# binary, a CI step), with output to $LOG. setsid forks when the caller is a group leader, so
# $! may not be the server: the final process writes its own pid before it becomes "$@". It
# must not inherit the lock on fd 9, or the lock would stay held for the server's whole life.
detach() {
	rm -f "$PIDFILE"
	setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' "$NAME" "$PIDFILE" "$@" \
		>>"$LOG" 2>&1 </dev/null 9>&- &
}

# stop_server sends SIGTERM to the server whose command line contains $1, waits up to
# $STOP_TIMEOUT seconds, then sends SIGKILL.
stop_server() {
	mkdir -p "$STATE"
	exec 9>"$LOCK"
	flock -w 120 9 || die "could not take $LOCK"
	local p
	if ! p="$(server_pid "$1")"; then
		echo "$NAME is not running"
		rm -f "$PIDFILE"
		return
	fi
	kill -TERM "$p"
	local deadline=$((SECONDS + STOP_TIMEOUT))
	while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do
		sleep 0.1
	done
	if kill -0 "$p" 2>/dev/null; then
		log "no exit ${STOP_TIMEOUT}s after SIGTERM: sending SIGKILL"
		kill -KILL "$p"
		while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
	fi
	rm -f "$PIDFILE"
	echo "$NAME stopped"
}

# ---- a stack started from another checkout --------------------------------------------
# The ports are fixed, so there is one stack per machine. A second checkout (a mentor's copy
# of a student's service beside ours) has no pid file of its own for it: it recognises a
# healthy server of the right kind on the port (each script's own probe), uses it as is,
# and never stops it.

# listener_pid prints the pid of the process listening on TCP port $1 (ss shows every
# user's processes to root, only one's own to others).
listener_pid() {
	local p
	command -v ss >/dev/null || return 1
	p="$(ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2)"
	[[ -n "$p" ]] || return 1
	echo "$p"
}

# owner_of prints the checkout whose scripts/stack started the server on port $1. Every
# server started by these scripts has a path under <checkout>/.stack on its command line
# (Kafka's classpath, Toxiproxy's binary, PostgreSQL's data directory) or, for a
# PostgreSQL that `pg_ctl restart` started again, as its working directory: that
# postmaster gets its data directory from PGDATA, not from -D, and a postmaster's
# working directory is its data directory. Without the second look, the db-restart
# scenario could restart a shared server only once.
owner_of() {
	local p arg dir
	p="$(listener_pid "$1")" || return 1
	[[ -r "/proc/$p/cmdline" ]] || return 1
	while IFS= read -r -d '' arg; do
		if [[ "$arg" == */.stack/* ]]; then
			echo "${arg%%/.stack/*}"
			return
		fi
	done <"/proc/$p/cmdline"
	dir="$(readlink "/proc/$p/cwd" 2>/dev/null)" || return 1
	if [[ "$dir/" == */.stack/* ]]; then
		echo "${dir%%/.stack/*}"
		return
	fi
	return 1
}

# describe_owner says where the server on port $1 comes from, for messages.
describe_owner() {
	local owner p
	if owner="$(owner_of "$1")"; then
		echo "$owner"
	elif p="$(listener_pid "$1")"; then
		echo "outside scripts/stack (pid $p)"
	else
		echo "another checkout or user (ss -ltnp 'sport = :$1' may tell which)"
	fi
}

# print_shared tells that the $NAME server on port $1 was not started by this checkout,
# that it is used as is, and how to stop it.
print_shared() {
	local owner script
	owner="$(describe_owner "$1")"
	script="$(basename "$0")"
	echo "$NAME is running, started from $owner: this checkout uses it and will not stop it"
	if [[ -f "$owner/scripts/stack/$script" ]]; then
		echo "Stop it from there: $owner/scripts/stack/$script stop"
	fi
}
