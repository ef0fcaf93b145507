#!/usr/bin/env bash
# kafka.sh: a native single-node Apache Kafka 4.4 broker (KRaft) owned by this project.
#
#   scripts/stack/kafka.sh start      download jars (first time), format, start, wait until ready
#   scripts/stack/kafka.sh stop       SIGTERM, wait up to 20 s, then SIGKILL
#   scripts/stack/kafka.sh status     exit 0 if the broker process runs and DIRECT accepts TCP
#   scripts/stack/kafka.sh logs [-f]  print (or follow) the broker log
#   scripts/stack/kafka.sh brokers    print the DIRECT address, the seed for the consumer
#
# A broker that another checkout started on these ports is recognised (it answers a Kafka
# request on DIRECT, and the owner file beside its config names a checkout of this
# project: lib.sh, "who started a server"), used as is by start and status, and never
# stopped from here. Any other process on one of the ports makes start fail, naming the
# port's variable.
#
# Listeners (see scripts/stack/kafka/server.properties.tmpl for why there are two client
# ones), with their defaults and variables (scripts/stack/ports.sh):
#   DIRECT     127.0.0.1:19092  KAFKASTACK_DIRECT_PORT: tests, consumer, verifier; never
#                               behind Toxiproxy
#   PROXIED    127.0.0.1:19094  KAFKASTACK_PROXIED_PORT, advertised as 127.0.0.1:29092
#                               (KAFKASTACK_PROXY_PORT), the Toxiproxy listener
#                               (scripts/stack/toxiproxy.sh) the relay bootstraps at
#   CONTROLLER 127.0.0.1:19093  KAFKASTACK_CONTROLLER_PORT: KRaft quorum
#
# The jars come from Maven Central (scripts/stack/kafka/pom.xml) into .stack/kafka-libs; the
# broker's data, config, owner file, log and pid live in .stack/kafka. `rm -rf .stack/kafka` (broker
# stopped) gives a fresh, empty broker on the next start.
#
# start is idempotent and safe to run concurrently (flock). It creates the topic
# payments.events (3 partitions) if missing; that creation, through the admin API on DIRECT,
# is also the readiness check. When KAFKA_BROKERS is set, the project uses that broker
# instead and start does nothing.
set -euo pipefail

NAME=Kafka
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOCK="$STATE/kafka.lock"
LIBS="$STATE/kafka-libs"
RUN="$STATE/kafka"
DATA="$RUN/data"
CONF="$RUN/server.properties"
PIDFILE="$RUN/kafka.pid"
LOG="$RUN/kafka.log"
SRC="$ROOT/scripts/stack/kafka"
LOG4J="-Dlog4j2.configurationFile=$SRC/log4j2.properties"

DIRECT_PORT="$KAFKASTACK_DIRECT_PORT"
TOPIC=payments.events
TOPIC_PARTITIONS=3
READY_TIMEOUT=90
STOP_TIMEOUT=20
# Any fixed 16-byte base64url UUID: the data dir is local and never joins another cluster.
CLUSTER_ID=cGF5bWVudHMtb3V0Ym94MQ

# Broker JVM: 512 MiB fixed heap; G1 (Kafka's own choice, short pauses) with few threads, as
# the 2 cores are shared with Postgres and the apps. SerialGC measured the same warm start
# (2.9 s). No -XX:TieredStopAtLevel=1: it would trade the broker's throughput for start-up.
BROKER_JVM=(-Xms512m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:ParallelGCThreads=2
	-XX:ConcGCThreads=1 -XX:CICompilerCount=2 -Djava.awt.headless=true)
# Short-lived tools (storage format, topic creation): start-up time is all that matters.
TOOL_JVM=(-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true)

log() { echo "kafka.sh: $*" >&2; }

die() {
	log "$*"
	if [[ -s "$LOG" ]]; then
		# The first errors name the cause; the tail below is often a shutdown stack trace.
		if grep -qE '^\[[^]]*\] (ERROR|FATAL) ' "$LOG"; then
			log "first errors in $LOG:"
			grep -m 5 -E '^\[[^]]*\] (ERROR|FATAL) ' "$LOG" >&2
		fi
		log "last 40 lines of $LOG:"
		tail -n 40 "$LOG" >&2
	fi
	exit 1
}

# pid prints the broker's pid if the pid file names a live kafka.Kafka process of this repo.
pid() { server_pid "kafka.Kafka $CONF"; }

# ensure_libs copies the broker's runtime classpath into .stack/kafka-libs. A stamp holding the
# pom's checksum makes it a no-op until the pom changes.
ensure_libs() {
	local sum
	sum="$(sha256sum "$SRC/pom.xml" | cut -d' ' -f1)"
	if [[ -f "$LIBS/.pom.sha256" && "$(<"$LIBS/.pom.sha256")" == "$sum" ]]; then
		return
	fi
	command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
	log "downloading Kafka jars with Maven into $LIBS"
	rm -rf "$LIBS.tmp"
	mvn -B -q -f "$SRC/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$LIBS.tmp" >&2 ||
		die "mvn dependency:copy-dependencies failed"
	echo "$sum" >"$LIBS.tmp/.pom.sha256"
	rm -rf "$LIBS"
	mv "$LIBS.tmp" "$LIBS"
}

java_tool() {
	java "${TOOL_JVM[@]}" "$LOG4J" -cp "$LIBS/*" "$@"
}

# ensure_topic creates payments.events if it is missing. It succeeds only when the broker
# answers admin requests on DIRECT with an active controller, so it doubles as the readiness check.
ensure_topic() {
	java_tool org.apache.kafka.tools.TopicCommand \
		--bootstrap-server "127.0.0.1:$DIRECT_PORT" \
		--command-config "$RUN/admin.properties" \
		--create --if-not-exists --topic "$TOPIC" \
		--partitions "$TOPIC_PARTITIONS" --replication-factor 1
}

# kafka_answers sends the broker an ApiVersions request (v0: api key 18, correlation id 1,
# client id "probe") on DIRECT and checks the answer's correlation id and error code: a
# healthy Kafka broker, not just any process, holds the port. It needs no jars, so a
# checkout that never started a broker can tell. $1 is the port, DIRECT by default.
kafka_answers() {
	local answer bytes port=${1:-$DIRECT_PORT}
	answer="$(timeout 3 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$1"
		printf "\x00\x00\x00\x0f\x00\x12\x00\x00\x00\x00\x00\x01\x00\x05probe" >&3
		head -c 10 <&3 | od -An -tx1' kafka_answers "$port" 2>/dev/null)" || return 1
	read -ra bytes <<<"$answer"
	# Bytes 0-3 are the size; then correlation id 1 and error code 0 (NONE).
	[[ "${bytes[*]:4:6}" == "00 00 00 01 00 00" ]]
}

# kafka_owner prints the checkout that started the broker answering on port $1 (DIRECT
# by default); it fails for any other process there, a Kafka broker or not.
kafka_owner() {
	local port=${1:-$DIRECT_PORT}
	kafka_answers "$port" && config_owner "$port" kafka.Kafka
}

print_listeners() {
	cat <<EOF
  DIRECT   127.0.0.1:$DIRECT_PORT  tests, consumer, verifier (no faults)
  PROXIED  127.0.0.1:$KAFKASTACK_PROXY_PORT  via Toxiproxy (scripts/stack/toxiproxy.sh start), bound on 127.0.0.1:$KAFKASTACK_PROXIED_PORT
  topic    $TOPIC ($TOPIC_PARTITIONS partitions)
EOF
}

print_endpoints() {
	echo "Kafka 4.4.0 is running (pid $1, log $LOG)"
	print_listeners
	echo "Stop it with: $ROOT/scripts/stack/kafka.sh stop"
}

# print_shared_endpoints is print_endpoints for a broker checkout $1 started.
print_shared_endpoints() {
	print_shared "$1"
	print_listeners
}

start() {
	if [[ -n "${KAFKA_BROKERS:-}" ]]; then
		echo "KAFKA_BROKERS is set ($KAFKA_BROKERS): using that broker, not starting one"
		return
	fi
	mkdir -p "$STATE" "$RUN"
	# The lock serializes concurrent starts; the broker itself must not inherit fd 9, or the
	# lock would stay held for the broker's whole life.
	exec 9>"$LOCK"
	flock -w 600 9 || die "another kafka.sh has held $LOCK for 10 minutes"

	local p by
	if p="$(pid)"; then
		echo "Kafka is already running (pid $p)"
		print_endpoints "$p"
		return
	fi
	if by="$(kafka_owner)"; then
		print_shared_endpoints "$by"
		return
	fi
	require_free "$DIRECT_PORT" KAFKASTACK_DIRECT_PORT "Kafka DIRECT listener"
	require_free "$KAFKASTACK_CONTROLLER_PORT" KAFKASTACK_CONTROLLER_PORT "Kafka CONTROLLER listener"
	require_free "$KAFKASTACK_PROXIED_PORT" KAFKASTACK_PROXIED_PORT "Kafka PROXIED listener"
	command -v java >/dev/null || die "java not found (Kafka 4 needs Java 17+)"

	local t0=$SECONDS
	ensure_libs
	sed -e "s|@DATA_DIR@|$DATA|" -e "s|@DIRECT_PORT@|$DIRECT_PORT|g" \
		-e "s|@PROXIED_PORT@|$KAFKASTACK_PROXIED_PORT|g" -e "s|@PROXY_PORT@|$KAFKASTACK_PROXY_PORT|g" \
		-e "s|@CONTROLLER_PORT@|$KAFKASTACK_CONTROLLER_PORT|g" "$SRC/server.properties.tmpl" >"$CONF"
	write_owner "$RUN"
	cat >"$RUN/admin.properties" <<-EOF
		request.timeout.ms=5000
		default.api.timeout.ms=10000
	EOF
	: >"$LOG"
	if [[ ! -f "$DATA/meta.properties" ]]; then
		log "formatting $DATA"
		# --standalone goes with controller.quorum.bootstrap.servers (dynamic quorum).
		java_tool kafka.tools.StorageTool format --standalone --ignore-formatted \
			-t "$CLUSTER_ID" -c "$CONF" >>"$LOG" 2>&1 || die "formatting the storage failed"
	fi

	log "starting the broker"
	detach java "${BROKER_JVM[@]}" "$LOG4J" -cp "$LIBS/*" kafka.Kafka "$CONF"
	local deadline=$((SECONDS + READY_TIMEOUT)) out
	until [[ -s "$PIDFILE" ]] && pid >/dev/null; do
		((SECONDS < deadline - READY_TIMEOUT + 10)) || die "the broker process did not start"
		sleep 0.1
	done
	until port_open "$DIRECT_PORT"; do
		pid >/dev/null || die "the broker exited during start-up"
		((SECONDS < deadline)) || die "the broker did not listen on $DIRECT_PORT within ${READY_TIMEOUT}s"
		sleep 0.2
	done
	until out="$(ensure_topic 2>&1)"; do
		pid >/dev/null || die "the broker exited during start-up"
		((SECONDS < deadline)) || die "the broker did not become ready within ${READY_TIMEOUT}s: $out"
		sleep 0.5
	done
	log "ready in $((SECONDS - t0))s"
	print_endpoints "$(pid)"
}

stop() {
	local by
	if ! pid >/dev/null && by="$(kafka_owner)"; then
		print_shared_endpoints "$by"
		return
	fi
	stop_server "kafka.Kafka $CONF"
}

status() {
	local p by
	if p="$(pid)" && port_open "$DIRECT_PORT"; then
		print_endpoints "$p"
		return
	fi
	if by="$(kafka_owner)"; then
		print_shared_endpoints "$by"
		return
	fi
	if port_open "$DIRECT_PORT"; then
		echo "Kafka: 127.0.0.1:$DIRECT_PORT is taken, but not by this project's broker (move this stack's port with KAFKASTACK_DIRECT_PORT)"
	else
		echo "Kafka is not running"
	fi
	return 1
}

logs() {
	[[ -f "$LOG" ]] || die "no log yet at $LOG"
	if [[ "${1:-}" == "-f" ]]; then
		exec tail -n 100 -F "$LOG"
	fi
	cat "$LOG"
}

# KAFKA_NODES=3 selects the three-node cluster, which has verbs of its own.
case "${KAFKA_NODES:-1}" in
1) ;;
3)
	source "$(dirname "${BASH_SOURCE[0]}")/kafka-cluster.sh"
	cluster_main "$@"
	exit
	;;
*) die "KAFKA_NODES=$KAFKA_NODES: use 1 (the default single broker) or 3 (the cluster)" ;;
esac

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
logs) logs "${2:-}" ;;
brokers) echo "127.0.0.1:$DIRECT_PORT" ;;
*)
	echo "usage: $0 start|stop|status|logs [-f]|brokers" >&2
	exit 2
	;;
esac
