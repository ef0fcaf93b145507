#!/usr/bin/env bash
# kafka.sh: a native single-node Apache Kafka 4.4 broker (KRaft) owned by this project.
#
#   scripts/stack/kafka.sh start      download jars (first time), format, start, wait until ready
#   scripts/stack/kafka.sh stop       SIGTERM, wait up to 20 s, then SIGKILL
#   scripts/stack/kafka.sh status     exit 0 if the broker process runs and DIRECT accepts TCP
#   scripts/stack/kafka.sh logs [-f]  print (or follow) the broker log
#   scripts/stack/kafka.sh brokers    print the DIRECT address, the seed for the consumer
#   scripts/stack/kafka.sh sasl-env   print the KAFKA_* settings that reach the SASL_SSL
#                                     listener: env $(scripts/stack/kafka.sh sasl-env) <command>
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
#   SASL_SSL   127.0.0.1:19095  KAFKASTACK_SASL_SSL_PORT: TLS and SCRAM, for testing the
#                               clients' KAFKA_TLS_* and KAFKA_SASL_* options
#   CONTROLLER 127.0.0.1:19093  KAFKASTACK_CONTROLLER_PORT: KRaft quorum
#
# The SASL_SSL listener's certificates are made with the JDK's keytool at the first start,
# into .stack/kafka/tls: a CA (ca.p12, and ca.pem for Go clients), the broker's keystore
# (broker.p12: a key and a certificate for 127.0.0.1 and localhost signed by the CA), a
# truststore holding the CA (truststore.p12, for Java clients), and the random passwords of
# the stores and of the SCRAM user $SCRAM_USER (store.password, scram.password).
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
TLS="$RUN/tls"
SCRAM_USER=payments-outbox
# The mechanism sasl-env prints; the broker accepts SCRAM-SHA-256 too, with the same password.
SCRAM_MECHANISM=SCRAM-SHA-512
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

# keytool_quiet runs the JDK's keytool with the short-lived tools' JVM flags, its output
# to the log.
keytool_quiet() {
	keytool -J-Xmx64m -J-XX:+UseSerialGC -J-XX:TieredStopAtLevel=1 "$@" >>"$LOG" 2>&1
}

# ensure_tls makes the SASL_SSL listener's CA, keystore, truststore and passwords in $TLS,
# unless they are there: a restart keeps them, so clients keep trusting the same CA.
# They are made in a temporary directory and moved in place, so a failed run leaves none.
ensure_tls() {
	if [[ -s "$TLS/ca.pem" && -s "$TLS/broker.p12" && -s "$TLS/truststore.p12" &&
		-s "$TLS/store.password" && -s "$TLS/scram.password" ]]; then
		return
	fi
	command -v keytool >/dev/null || die "keytool not found (it comes with the JDK that runs Kafka)"
	log "making the SASL_SSL listener's CA and keystores with keytool in $TLS"
	local tmp="$TLS.tmp" pass
	rm -rf "$tmp"
	mkdir -m 700 -p "$tmp"
	# Letters and digits only: the SCRAM password goes into --add-scram's [name=,password=].
	random_password() { head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 32; }
	pass="$(random_password)"
	echo "$pass" >"$tmp/store.password"
	random_password >"$tmp/scram.password"
	local ca=(-keystore "$tmp/ca.p12" -storetype PKCS12 -storepass "$pass")
	local broker=(-keystore "$tmp/broker.p12" -storetype PKCS12 -storepass "$pass")
	# ECDSA P-256 keys, ten years: a throwaway CA for one machine's development broker.
	keytool_quiet -genkeypair -alias ca -dname "CN=payments-outbox development CA" -keyalg EC \
		-groupname secp256r1 -validity 3650 -ext bc:c "${ca[@]}" || die "keytool: making the CA failed"
	keytool_quiet -exportcert -rfc -alias ca -file "$tmp/ca.pem" "${ca[@]}" || die "keytool: exporting the CA failed"
	keytool_quiet -genkeypair -alias broker -dname "CN=localhost" -keyalg EC -groupname secp256r1 \
		-validity 3650 "${broker[@]}" || die "keytool: making the broker's key failed"
	keytool_quiet -certreq -alias broker -file "$tmp/broker.csr" "${broker[@]}" || die "keytool: the broker's request failed"
	# Go checks the subject alternative names, not the CN: the broker is dialled as 127.0.0.1.
	keytool_quiet -gencert -alias ca -infile "$tmp/broker.csr" -outfile "$tmp/broker.pem" -rfc -validity 3650 \
		-ext SAN=ip:127.0.0.1,dns:localhost -ext KU:c=digitalSignature -ext EKU=serverAuth "${ca[@]}" ||
		die "keytool: signing the broker's certificate failed"
	keytool_quiet -importcert -noprompt -alias ca -file "$tmp/ca.pem" "${broker[@]}" &&
		keytool_quiet -importcert -alias broker -file "$tmp/broker.pem" "${broker[@]}" ||
		die "keytool: filling the broker's keystore failed"
	keytool_quiet -importcert -noprompt -alias ca -file "$tmp/ca.pem" \
		-keystore "$tmp/truststore.p12" -storetype PKCS12 -storepass "$pass" || die "keytool: making the truststore failed"
	rm -f "$tmp/broker.csr"
	rm -rf "$TLS"
	mv "$tmp" "$TLS"
	# New passwords: the SCRAM user must be (re)written with this one.
	rm -f "$RUN/scram.done"
}

# scram_password prints the SCRAM user's password. The broker keeps it for both SCRAM
# mechanisms, as salted hashes.
scram_password() { echo "$(<"$TLS/scram.password")"; }

# ensure_scram_user writes $SCRAM_USER's credentials through DIRECT with kafka-configs, for
# a data directory that was formatted before the SASL_SSL listener existed or before the
# passwords were made anew; a data directory formatted by this start has them already.
ensure_scram_user() {
	[[ -f "$RUN/scram.done" ]] && return
	local mechanism out
	# One mechanism per request: the broker refuses two changes of one user's credentials
	# in one. The tool echoes its arguments on failure: the password is hidden from them.
	for mechanism in SCRAM-SHA-256 SCRAM-SHA-512; do
		out="$(java_tool org.apache.kafka.tools.ConfigCommand \
			--bootstrap-server "127.0.0.1:$DIRECT_PORT" --command-config "$RUN/admin.properties" \
			--alter --entity-type users --entity-name "$SCRAM_USER" \
			--add-config "$mechanism=[password=$(scram_password)]" 2>&1)" ||
			die "adding the SCRAM user $SCRAM_USER ($mechanism) failed: ${out//$(scram_password)/[hidden]}"
	done
	touch "$RUN/scram.done"
}

# sasl_env prints the settings of docs/contract.md that reach the SASL_SSL listener of the
# broker this checkout uses, its own or another checkout's: the CA and the password are in
# the tls directory beside that broker's config file.
sasl_env() {
	local run by="$ROOT" p
	if p="$(pid)"; then
		run="$RUN"
	elif by="$(kafka_owner)"; then
		run="$(dirname "$(command_line "$(listener_pid "$DIRECT_PORT")" | sed 's/.* kafka\.Kafka //')")"
	else
		log "Kafka is not running: start it with $ROOT/scripts/stack/kafka.sh start"
		exit 1
	fi
	# Not die: the log it prints is this checkout's, and the broker may be another's.
	if [[ ! -s "$run/tls/ca.pem" ]] || ! port_open "$KAFKASTACK_SASL_SSL_PORT"; then
		log "the broker on 127.0.0.1:$DIRECT_PORT, started from $by, has no SASL_SSL listener on 127.0.0.1:$KAFKASTACK_SASL_SSL_PORT: it was started by a kafka.sh from before that listener. Restart it there: $by/scripts/stack/kafka.sh stop, then start"
		exit 1
	fi
	cat <<-EOF
		KAFKA_BROKERS=127.0.0.1:$KAFKASTACK_SASL_SSL_PORT
		KAFKA_TLS_CA_FILE=$run/tls/ca.pem
		KAFKA_SASL_MECHANISM=$SCRAM_MECHANISM
		KAFKA_SASL_USERNAME=$SCRAM_USER
		KAFKA_SASL_PASSWORD_FILE=$run/tls/scram.password
	EOF
}

print_listeners() {
	cat <<EOF
  DIRECT   127.0.0.1:$DIRECT_PORT  tests, consumer, verifier (no faults)
  PROXIED  127.0.0.1:$KAFKASTACK_PROXY_PORT  via Toxiproxy (scripts/stack/toxiproxy.sh start), bound on 127.0.0.1:$KAFKASTACK_PROXIED_PORT
  SASL_SSL 127.0.0.1:$KAFKASTACK_SASL_SSL_PORT  TLS and SCRAM user $SCRAM_USER (settings: $ROOT/scripts/stack/kafka.sh sasl-env)
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
	require_free "$KAFKASTACK_SASL_SSL_PORT" KAFKASTACK_SASL_SSL_PORT "Kafka SASL_SSL listener"
	command -v java >/dev/null || die "java not found (Kafka 4 needs Java 17+)"

	local t0=$SECONDS
	ensure_libs
	: >"$LOG"
	ensure_tls
	sed -e "s|@DATA_DIR@|$DATA|" -e "s|@DIRECT_PORT@|$DIRECT_PORT|g" \
		-e "s|@PROXIED_PORT@|$KAFKASTACK_PROXIED_PORT|g" -e "s|@PROXY_PORT@|$KAFKASTACK_PROXY_PORT|g" \
		-e "s|@SASL_SSL_PORT@|$KAFKASTACK_SASL_SSL_PORT|g" -e "s|@TLS_DIR@|$TLS|g" \
		-e "s|@STORE_PASSWORD@|$(<"$TLS/store.password")|g" \
		-e "s|@CONTROLLER_PORT@|$KAFKASTACK_CONTROLLER_PORT|g" "$SRC/server.properties.tmpl" >"$CONF"
	write_owner "$RUN"
	cat >"$RUN/admin.properties" <<-EOF
		request.timeout.ms=5000
		default.api.timeout.ms=10000
	EOF
	if [[ ! -f "$DATA/meta.properties" ]]; then
		log "formatting $DATA"
		# --standalone goes with controller.quorum.bootstrap.servers (dynamic quorum).
		# --add-scram writes the SCRAM user into the first metadata, ready at the first start.
		java_tool kafka.tools.StorageTool format --standalone --ignore-formatted \
			-t "$CLUSTER_ID" -c "$CONF" \
			--add-scram "SCRAM-SHA-256=[name=$SCRAM_USER,password=$(scram_password)]" \
			--add-scram "SCRAM-SHA-512=[name=$SCRAM_USER,password=$(scram_password)]" \
			>>"$LOG" 2>&1 || die "formatting the storage failed"
		touch "$RUN/scram.done"
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
	ensure_scram_user
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
sasl-env) sasl_env ;;
*)
	echo "usage: $0 start|stop|status|logs [-f]|brokers|sasl-env" >&2
	exit 2
	;;
esac
