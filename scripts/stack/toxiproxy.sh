#!/usr/bin/env bash
# toxiproxy.sh: a native Toxiproxy server in front of the Kafka broker's PROXIED listener.
#
#   scripts/stack/toxiproxy.sh start    build (first time), start, create proxy kafka_relay
#   scripts/stack/toxiproxy.sh stop     SIGTERM, wait up to 20 s, then SIGKILL
#   scripts/stack/toxiproxy.sh status   exit 0 if the API answers and kafka_relay exists
#
# A server that another checkout started is recognised (its API answers, and the owner
# file beside its config names a checkout of this project: lib.sh, "who started a
# server"), used as is by start and status (start recreates kafka_relay if it is
# missing), and never stopped from here. Any other process on one of its ports makes
# start fail, naming the port's variable.
#
# Ports, with their defaults and variables (scripts/stack/ports.sh):
#   API           127.0.0.1:8474   TOXISTACK_API_PORT
#   kafka_relay   127.0.0.1:29092  KAFKASTACK_PROXY_PORT, forwards to the broker's PROXIED
#                 listener (KAFKASTACK_PROXIED_PORT), which advertises this address: a client
#                 that bootstraps here (the relay under chaos) keeps all its traffic behind
#                 the proxy.
#   postgres_api  127.0.0.1:25432  PGSTACK_PROXY_PORT, forwards to PostgreSQL (PGSTACK_PORT):
#                 only the pg-faults chaos scenario points a service at it (its API and relay).
#   postgres_consumer  127.0.0.1:25433  PGSTACK_CONSUMER_PROXY_PORT, forwards to PostgreSQL:
#                 only the consumer-db chaos scenario points a service at it (the consumer).
#                 The harness creates it when a server started before it existed lacks it,
#                 so status does not require it.
# Toxics are added and removed through the API, e.g.
#   curl -s -XPOST 127.0.0.1:8474/proxies/kafka_relay/toxics \
#     -d '{"name":"blackhole","type":"timeout","stream":"upstream","attributes":{"timeout":0}}'
#   curl -s -XDELETE 127.0.0.1:8474/proxies/kafka_relay/toxics/blackhole
#
# The server is built from the Go module pinned in go.mod (a `tool` directive) into
# .stack/bin/toxiproxy-server; its pid, log, owner file and proxy config live in
# .stack/toxiproxy.
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
API_PORT="$TOXISTACK_API_PORT"
API="http://127.0.0.1:$API_PORT"
PROXY=kafka_relay
PG_PROXY=postgres_api
CONSUMER_PG_PROXY=postgres_consumer
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

# toxiproxy_owner prints the checkout that started the server whose API answers on
# API_PORT; it fails for any other process there.
toxiproxy_owner() {
	api_up && config_owner "$API_PORT" -config
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
	echo "  $PROXY  127.0.0.1:$KAFKASTACK_PROXY_PORT -> 127.0.0.1:$KAFKASTACK_PROXIED_PORT (Kafka PROXIED listener)"
	echo "  $PG_PROXY 127.0.0.1:$PGSTACK_PROXY_PORT -> 127.0.0.1:$PGSTACK_PORT (PostgreSQL; pg-faults scenario only)"
	echo "  $CONSUMER_PG_PROXY 127.0.0.1:$PGSTACK_CONSUMER_PROXY_PORT -> 127.0.0.1:$PGSTACK_PORT (PostgreSQL; consumer-db scenario only)"
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
		  {"name": "$PROXY", "listen": "127.0.0.1:$KAFKASTACK_PROXY_PORT", "upstream": "127.0.0.1:$KAFKASTACK_PROXIED_PORT", "enabled": true},
		  {"name": "$PG_PROXY", "listen": "127.0.0.1:$PGSTACK_PROXY_PORT", "upstream": "127.0.0.1:$PGSTACK_PORT", "enabled": true},
		  {"name": "$CONSUMER_PG_PROXY", "listen": "127.0.0.1:$PGSTACK_CONSUMER_PROXY_PORT", "upstream": "127.0.0.1:$PGSTACK_PORT", "enabled": true}
		]
	EOF
}

start() {
	command -v curl >/dev/null || die "curl not found (apt-get install curl)"
	mkdir -p "$STATE/bin" "$RUN"
	exec 9>"$LOCK"
	flock -w 600 9 || die "another toxiproxy.sh has held $LOCK for 10 minutes"

	local p by=
	write_config
	if p="$(pid)" && api_up; then
		echo "Toxiproxy is already running (pid $p)"
	elif by="$(toxiproxy_owner)"; then
		: # a server another checkout started, used as is
	else
		require_free "$API_PORT" TOXISTACK_API_PORT "Toxiproxy API"
		# A proxy whose port is taken is only logged by the server, which runs without it.
		require_free "$KAFKASTACK_PROXY_PORT" KAFKASTACK_PROXY_PORT "Toxiproxy proxy $PROXY"
		require_free "$PGSTACK_PROXY_PORT" PGSTACK_PROXY_PORT "Toxiproxy proxy $PG_PROXY"
		require_free "$PGSTACK_CONSUMER_PROXY_PORT" PGSTACK_CONSUMER_PROXY_PORT "Toxiproxy proxy $CONSUMER_PG_PROXY"
		ensure_bin
		: >"$LOG"
		write_owner "$RUN"
		# -config last: config_owner reads the path from the end of the command line.
		detach "$BIN" -host 127.0.0.1 -port "$API_PORT" -config "$CONFIG"
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
			die "could not create proxies $PROXY and $PG_PROXY (is 127.0.0.1:$KAFKASTACK_PROXY_PORT or 127.0.0.1:$PGSTACK_PROXY_PORT taken? KAFKASTACK_PROXY_PORT and PGSTACK_PROXY_PORT move them)"
	fi
	if [[ -n "$by" ]]; then
		print_shared "$by"
		print_proxy
		return
	fi
	print_endpoints "$(pid)"
}

stop() {
	local by
	if ! pid >/dev/null && by="$(toxiproxy_owner)"; then
		print_shared "$by"
		return
	fi
	stop_server "$BIN"
}

status() {
	local p by
	if p="$(pid)" && api_up && proxy_exists; then
		print_endpoints "$p"
		return
	fi
	if by="$(toxiproxy_owner)" && proxy_exists; then
		print_shared "$by"
		print_proxy
		return
	fi
	if port_open "$API_PORT" && ! by="$(toxiproxy_owner)"; then
		echo "Toxiproxy: 127.0.0.1:$API_PORT is taken, but not by this project's Toxiproxy (move this stack's port with TOXISTACK_API_PORT)"
		return 1
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
