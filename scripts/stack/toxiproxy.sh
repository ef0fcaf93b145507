#!/usr/bin/env bash
# toxiproxy.sh: a native Toxiproxy server in front of the Kafka broker's PROXIED listener.
#
#   scripts/stack/toxiproxy.sh start    build (first time), start, create proxy kafka_relay
#   scripts/stack/toxiproxy.sh stop     SIGTERM, wait up to 20 s, then SIGKILL
#   scripts/stack/toxiproxy.sh status   exit 0 if the API answers and kafka_relay exists
#
# A server that another checkout started is recognised by its API, used as is by start
# and status (start recreates kafka_relay if it is missing), and never stopped from here.
#
# API on 127.0.0.1:8474. Proxy kafka_relay listens on 127.0.0.1:29092 and forwards to
# 127.0.0.1:19094, the broker's PROXIED listener, which advertises 127.0.0.1:29092: a client
# that bootstraps at 29092 (the relay under chaos) keeps all its traffic behind the proxy.
# Proxy postgres_api listens on 127.0.0.1:25432 and forwards to PostgreSQL (127.0.0.1:55432):
# only the pg-faults chaos scenario points a service at it (its API and relay).
# Toxics are added and removed through the API, e.g.
#   curl -s -XPOST 127.0.0.1:8474/proxies/kafka_relay/toxics \
#     -d '{"name":"blackhole","type":"timeout","stream":"upstream","attributes":{"timeout":0}}'
#   curl -s -XDELETE 127.0.0.1:8474/proxies/kafka_relay/toxics/blackhole
#
# The server is built from the Go module pinned in go.mod (a `tool` directive) into
# .stack/bin/toxiproxy-server; its pid, log and proxy config live in .stack/toxiproxy.
# Tests do not need this: internal/testenv.StartToxiproxy runs one in-process.
set -euo pipefail

NAME=Toxiproxy
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOCK="$STATE/toxiproxy.lock"
BIN="$STATE/bin/toxiproxy-server"
RUN="$STATE/toxiproxy"
PIDFILE="$RUN/toxiproxy.pid"
LOG="$RUN/toxiproxy.log"
CONFIG="$RUN/toxiproxy.json"
MODULE=github.com/Shopify/toxiproxy/v2
API=http://127.0.0.1:8474
PROXY=kafka_relay
PG_PROXY=postgres_api
READY_TIMEOUT=15
STOP_TIMEOUT=20

log() { echo "toxiproxy.sh: $*" >&2; }

die() {
	log "$*"
	if [[ -s "$LOG" ]]; then
		log "last 20 lines of $LOG:"
		tail -n 20 "$LOG" >&2
	fi
	exit 1
}

pid() { server_pid "$BIN"; }

api_up() {
	curl -fsS -o /dev/null --max-time 2 "$API/version" 2>/dev/null
}

proxy_exists() {
	curl -fsS -o /dev/null --max-time 2 "$API/proxies/$PROXY" 2>/dev/null &&
		curl -fsS -o /dev/null --max-time 2 "$API/proxies/$PG_PROXY" 2>/dev/null
}

# ensure_bin builds the server at the version go.mod pins, stamped into the binary with -X so
# that `toxiproxy-server -version` tells whether a rebuild is due.
ensure_bin() {
	local want have=""
	want="$(cd "$ROOT" && go list -m -f '{{.Version}}' "$MODULE")" ||
		die "go list -m $MODULE failed: is it in go.mod? (go get -tool $MODULE/cmd/server@v2.12.0)"
	if [[ -x "$BIN" ]]; then
		have="$("$BIN" -version 2>/dev/null | awk '{print $NF}')"
	fi
	[[ "$have" == "$want" ]] && return
	log "building $MODULE/cmd/server@$want into $BIN"
	(cd "$ROOT" && go build -ldflags "-X $MODULE.Version=$want" -o "$BIN" "$MODULE/cmd/server") ||
		die "go build of $MODULE/cmd/server failed"
}

print_proxy() {
	echo "  API          $API"
	echo "  $PROXY  127.0.0.1:29092 -> 127.0.0.1:19094 (Kafka PROXIED listener)"
	echo "  $PG_PROXY 127.0.0.1:25432 -> 127.0.0.1:55432 (PostgreSQL; pg-faults scenario only)"
}

print_endpoints() {
	echo "Toxiproxy is running (pid $1, log $LOG)"
	print_proxy
	echo "Stop it with: $ROOT/scripts/stack/toxiproxy.sh stop"
}

# write_config writes the proxy definition, read by the server at start-up and by
# /populate when the proxy has gone missing.
write_config() {
	cat >"$CONFIG" <<-EOF
		[
		  {"name": "$PROXY", "listen": "127.0.0.1:29092", "upstream": "127.0.0.1:19094", "enabled": true},
		  {"name": "$PG_PROXY", "listen": "127.0.0.1:25432", "upstream": "127.0.0.1:55432", "enabled": true}
		]
	EOF
}

start() {
	command -v curl >/dev/null || die "curl not found (apt-get install curl)"
	mkdir -p "$STATE/bin" "$RUN"
	exec 9>"$LOCK"
	flock -w 600 9 || die "another toxiproxy.sh has held $LOCK for 10 minutes"

	local p shared=
	write_config
	if p="$(pid)" && api_up; then
		echo "Toxiproxy is already running (pid $p)"
	elif api_up; then
		# Toxiproxy's API answers: a server another checkout started, used as is.
		shared=1
	else
		ensure_bin
		: >"$LOG"
		detach "$BIN" -host 127.0.0.1 -port 8474 -config "$CONFIG"
		local deadline=$((SECONDS + READY_TIMEOUT))
		until [[ -s "$PIDFILE" ]] && api_up; do
			if [[ -s "$PIDFILE" ]] && ! pid >/dev/null; then die "the server exited during start-up"; fi
			((SECONDS < deadline)) || die "the API did not answer on $API within ${READY_TIMEOUT}s"
			sleep 0.1
		done
	fi
	# The config file is read only at start-up; recreate the proxy if someone deleted it.
	if ! proxy_exists; then
		curl -fsS -o /dev/null --max-time 5 -XPOST "$API/populate" --data-binary "@$CONFIG" ||
			die "could not create proxies $PROXY and $PG_PROXY (is 127.0.0.1:29092 or 127.0.0.1:25432 taken?)"
	fi
	if [[ -n "$shared" ]]; then
		print_shared 8474
		print_proxy
		return
	fi
	print_endpoints "$(pid)"
}

stop() {
	if ! pid >/dev/null && api_up; then
		print_shared 8474
		return
	fi
	stop_server "$BIN"
}

status() {
	local p
	if p="$(pid)" && api_up && proxy_exists; then
		print_endpoints "$p"
		return
	fi
	if api_up && proxy_exists; then
		print_shared 8474
		print_proxy
		return
	fi
	echo "Toxiproxy is not running (or proxy $PROXY is missing)"
	return 1
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 2
	;;
esac
