# lib.sh: what postgres.sh, kafka.sh and toxiproxy.sh share, sourced by each: the ports
# (ports.sh, checked here), who started a server, and the one message of a taken port.
# kafka.sh and toxiproxy.sh run their server detached from the caller, with a pid file the
# server writes itself and a lock serializing start/stop. Before sourcing, the caller sets
# NAME (for messages); afterwards it sets LOCK, PIDFILE, LOG, STOP_TIMEOUT and defines log.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="$ROOT/.stack"

source "$(dirname "${BASH_SOURCE[0]}")/ports.sh"
for var in "${STACK_PORT_VARS[@]}"; do
	if ! [[ "${!var}" =~ ^[1-9][0-9]{0,4}$ ]] || ((${!var} > 65535)); then
		echo "$(basename "$0"): $var=${!var} is not a port number (scripts/stack/ports.sh)" >&2
		exit 2
	fi
done
unset var
if ((KAFKASTACK_CLUSTER_PORT > 65535 - 303)); then
	echo "$(basename "$0"): KAFKASTACK_CLUSTER_PORT=$KAFKASTACK_CLUSTER_PORT leaves no room for the cluster's ports, up to +303" >&2
	exit 2
fi

# server_pid prints the pid in $PIDFILE if it names a live process whose command line
# contains $1: a pid file left by a crash may name an unrelated process by now.
server_pid() {
	local p
	[[ -s "$PIDFILE" ]] || return 1
	p="$(<"$PIDFILE")"
	command_line "$p" | grep -qF -- "$1" || return 1
	echo "$p"
}

# command_line prints the command line of process $1: from /proc on Linux (a minimal
# image may have no ps), from ps elsewhere (macOS has no /proc).
command_line() {
	if [[ -d /proc/self ]]; then
		[[ -r "/proc/$1/cmdline" ]] && tr '\0' ' ' <"/proc/$1/cmdline" | sed 's/ $//'
	else
		ps -ww -o args= -p "$1" 2>/dev/null
	fi
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

# ---- who started a server -----------------------------------------------------------
# One stack serves every checkout on the machine that uses the same ports (a mentor's copy
# of a student's service beside ours): a checkout uses a server another one started, as is,
# and never stops it. Whether a server on a port is this project's, and which checkout
# started it, is written in the server's own state, so that it can be found wherever that
# state lives (PostgreSQL's data directory moves to /tmp when the postgres user cannot
# enter the checkout): PostgreSQL carries it as a setting (postgres.sh), Kafka and
# Toxiproxy as the file $OWNER_FILE beside the config file named on their command line.
# A server whose port answers but has no such record is somebody else's: start fails,
# naming the port and the variable of ports.sh that moves this stack off it.
OWNER_FILE=payments-outbox.owner

# write_owner records this checkout as the owner of the server whose config lives in $1.
write_owner() {
	echo "$ROOT" >"$1/$OWNER_FILE"
}

# owner_in prints the checkout recorded in directory $1. A server started before the
# scripts kept this record has its state in <checkout>/.stack: that checkout, if its
# scripts/stack is there, is its owner.
owner_in() {
	local dir=$1 owner
	if [[ -s "$dir/$OWNER_FILE" ]]; then
		echo "$(<"$dir/$OWNER_FILE")"
		return
	fi
	[[ "$dir/" == */.stack/* ]] || return 1
	owner="${dir%%/.stack/*}"
	[[ -f "$owner/scripts/stack/lib.sh" ]] || return 1
	echo "$owner"
}

port_open() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# listener_pid prints the pid of the process listening on TCP port $1: ss on Linux, lsof
# elsewhere. Both show every user's processes to root, only one's own to others.
listener_pid() {
	local p=""
	if command -v ss >/dev/null; then
		p="$(ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2)"
	elif command -v lsof >/dev/null; then
		p="$(lsof -nP -iTCP:"$1" -sTCP:LISTEN -t 2>/dev/null | head -n 1)"
	fi
	[[ -n "$p" ]] || return 1
	echo "$p"
}

# config_owner prints the owner of the server listening on port $1 whose command line
# ends in "$2 <config file>" (kafka.Kafka, -config).
config_owner() {
	local p args
	p="$(listener_pid "$1")" || return 1
	args="$(command_line "$p")" || return 1
	[[ "$args" == *" $2 "* ]] || return 1
	owner_in "$(dirname "${args##* "$2" }")"
}

# port_taken exits with the one message a taken port gets: what holds 127.0.0.1:$1, that
# it is not this project's $NAME, and the variable $2 that moves the port ($3 says what
# the port is for).
port_taken() {
	local port=$1 var=$2 what=$3 holder p
	if p="$(listener_pid "$port")"; then
		holder="pid $p ($(command_line "$p" | cut -c1-80)), which is not this project's $NAME"
	else
		holder="a process this user cannot see (another user's), which this checkout cannot tell for this project's $NAME"
	fi
	echo "$(basename "$0"): 127.0.0.1:$port ($what) is taken by $holder." >&2
	echo "Stop it, or move this stack's port: export $var=<a free port> (every port and its variable: scripts/stack/ports.sh)" >&2
	exit 1
}

# require_free calls port_taken when something listens on port $1.
require_free() {
	if port_open "$1"; then port_taken "$@"; fi
}

# print_shared tells that the $NAME server was started by checkout $1, that this one uses
# it as is, and how to stop it.
print_shared() {
	local owner=$1 script
	script="$(basename "$0")"
	echo "$NAME is running, started from $owner: this checkout uses it and will not stop it"
	if [[ -f "$owner/scripts/stack/$script" ]]; then
		echo "Stop it from there: $owner/scripts/stack/$script stop"
	fi
}
