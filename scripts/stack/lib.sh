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
