# kafka-cluster.sh: the three-node KRaft cluster of `KAFKA_NODES=3 scripts/stack/kafka.sh`.
# kafka.sh sources it (for its jars, JVM flags and probes) and hands it the command line:
#
#   KAFKA_NODES=3 scripts/stack/kafka.sh start          format (first time), start the three
#                                                       nodes, add their proxies, create the topic
#   KAFKA_NODES=3 scripts/stack/kafka.sh stop           stop the nodes, remove their proxies
#   KAFKA_NODES=3 scripts/stack/kafka.sh status         exit 0 if all three answer on DIRECT
#   KAFKA_NODES=3 scripts/stack/kafka.sh logs <n> [-f]  print (or follow) node n's log
#   KAFKA_NODES=3 scripts/stack/kafka.sh brokers        print the DIRECT addresses, comma-separated
#   KAFKA_NODES=3 scripts/stack/kafka.sh kill-node <n>  SIGKILL node n (a crash; for chaos)
#   KAFKA_NODES=3 scripts/stack/kafka.sh stop-node <n>  SIGTERM node n: a controlled shutdown
#                                                       that moves its leaderships away first
#   KAFKA_NODES=3 scripts/stack/kafka.sh start-node <n> start node n again, wait for DIRECT
#
# It runs beside the single broker and shares none of its ports or files. Its ports are
# counted from KAFKASTACK_CLUSTER_PORT (scripts/stack/ports.sh), by default 21190: below
# 32768, outside Linux's ephemeral range, so no outgoing connection holds one. Node n,
# with the defaults:
#   DIRECT     127.0.0.1:2119n  consumer, tests, verifier, replication (never proxied)
#   PROXIED    127.0.0.1:2129n  advertised as 127.0.0.1:2139n, where the Toxiproxy proxy
#                               kafka_cluster_n forwards from: the relay seeds at 2139n
#   CONTROLLER 127.0.0.1:2149n  KRaft quorum
# Data, config, owner file, log and pid of node n live in .stack/kafka-cluster/node-n.

CLUSTER_NODES=(1 2 3)
direct_port() { echo $((KAFKASTACK_CLUSTER_PORT + $1)); }
proxied_port() { echo $((KAFKASTACK_CLUSTER_PORT + 100 + $1)); }
proxy_port() { echo $((KAFKASTACK_CLUSTER_PORT + 200 + $1)); }
controller_port() { echo $((KAFKASTACK_CLUSTER_PORT + 300 + $1)); }
CLUSTER_RUN="$STATE/kafka-cluster"
CLUSTER_LOCK="$STATE/kafka-cluster.lock"
# Another fixed id: the cluster's data dirs must never be mistaken for the single broker's.
CLUSTER_CLUSTER_ID=cGF5bWVudHMtY2x1c3RlcjM
CLUSTER_VOTERS="1@127.0.0.1:$(controller_port 1),2@127.0.0.1:$(controller_port 2),3@127.0.0.1:$(controller_port 3)"
TOXIPROXY_API="http://127.0.0.1:$TOXISTACK_API_PORT"
# Three JVMs starting at once on a busy 2-core machine can take longer than the single
# broker's READY_TIMEOUT (90 s): the cluster waits twice as long.
READY_TIMEOUT=180

# Each node gets a third of the single broker's heap: three brokers, one machine.
CLUSTER_JVM=(-Xms256m -Xmx256m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:ParallelGCThreads=1
	-XX:ConcGCThreads=1 -XX:CICompilerCount=2 -Djava.awt.headless=true)

node_dir() { echo "$CLUSTER_RUN/node-$1"; }

# node_pid prints node n's pid if its pid file names a live kafka.Kafka of this checkout.
node_pid() {
	local PIDFILE
	PIDFILE="$(node_dir "$1")/kafka.pid"
	server_pid "kafka.Kafka $(node_dir "$1")/server.properties"
}

check_node() {
	[[ "${1:-}" =~ ^[123]$ ]] || die "name a node: 1, 2 or 3 (got '${1:-}')"
}

render_node() {
	local n=$1 dir
	dir="$(node_dir "$n")"
	mkdir -p "$dir"
	sed -e "s|@NODE_ID@|$n|" -e "s|@VOTERS@|$CLUSTER_VOTERS|" \
		-e "s|@DIRECT_PORT@|$(direct_port "$n")|" -e "s|@PROXIED_PORT@|$(proxied_port "$n")|" \
		-e "s|@PROXY_PORT@|$(proxy_port "$n")|" -e "s|@CONTROLLER_PORT@|$(controller_port "$n")|" \
		-e "s|@DATA_DIR@|$dir/data|" "$SRC/cluster.properties.tmpl" >"$dir/server.properties"
	write_owner "$dir"
}

format_node() {
	local n=$1 dir
	dir="$(node_dir "$n")"
	[[ -f "$dir/data/meta.properties" ]] && return
	log "formatting node $n"
	LOG="$dir/kafka.log"
	java_tool kafka.tools.StorageTool format --ignore-formatted \
		-t "$CLUSTER_CLUSTER_ID" -c "$dir/server.properties" >>"$LOG" 2>&1 ||
		die "formatting node $n failed"
}

# launch_node starts node n detached; wait_node waits for it.
launch_node() {
	local n=$1 dir PIDFILE LOG
	dir="$(node_dir "$n")"
	PIDFILE="$dir/kafka.pid" LOG="$dir/kafka.log"
	: >"$LOG"
	detach java "${CLUSTER_JVM[@]}" "$LOG4J" -cp "$LIBS/*" kafka.Kafka "$dir/server.properties"
}

# wait_node waits until node n answers on DIRECT; the pid file may take a moment to
# appear, so a missing process counts as an exit only after 5 s.
wait_node() {
	local n=$1 LOG t0=$SECONDS deadline=$((SECONDS + READY_TIMEOUT))
	LOG="$(node_dir "$n")/kafka.log"
	until kafka_answers "$(direct_port "$n")"; do
		if ! node_pid "$n" >/dev/null && ((SECONDS > t0 + 5)); then
			die "node $n exited during start-up"
		fi
		((SECONDS < deadline)) || die "node $n did not answer on $(direct_port "$n") within ${READY_TIMEOUT}s"
		sleep 0.2
	done
}

# ensure_proxies adds kafka_cluster_<n> (127.0.0.1:2139n -> 127.0.0.1:2129n) to the running
# Toxiproxy; /populate leaves an unchanged proxy alone, so this is idempotent.
ensure_proxies() {
	local body="[" n
	for n in "${CLUSTER_NODES[@]}"; do
		body+="{\"name\":\"kafka_cluster_$n\",\"listen\":\"127.0.0.1:$(proxy_port "$n")\",\"upstream\":\"127.0.0.1:$(proxied_port "$n")\",\"enabled\":true}"
		((n < 3)) && body+=","
	done
	body+="]"
	curl -fsS -o /dev/null --max-time 5 -XPOST "$TOXIPROXY_API/populate" --data-binary "$body" ||
		die "could not add the proxies kafka_cluster_1..3 to Toxiproxy at $TOXIPROXY_API (start it: scripts/stack/toxiproxy.sh start)"
}

remove_proxies() {
	local n
	for n in "${CLUSTER_NODES[@]}"; do
		curl -fsS -o /dev/null --max-time 5 -XDELETE "$TOXIPROXY_API/proxies/kafka_cluster_$n" 2>/dev/null || true
	done
}

cluster_brokers() {
	local n out=()
	for n in "${CLUSTER_NODES[@]}"; do out+=("127.0.0.1:$(direct_port "$n")"); done
	(IFS=,; echo "${out[*]}")
}

# ensure_cluster_topic creates payments.events with three replicas on three brokers. It
# succeeds only once the quorum has a leader and all three brokers are registered (a
# replication factor of 3 needs three), so it doubles as the readiness check.
ensure_cluster_topic() {
	java_tool org.apache.kafka.tools.TopicCommand \
		--bootstrap-server "$(cluster_brokers)" \
		--command-config "$CLUSTER_RUN/admin.properties" \
		--create --if-not-exists --topic "$TOPIC" \
		--partitions "$TOPIC_PARTITIONS" --replication-factor 3 \
		--config min.insync.replicas=2 --config unclean.leader.election.enable=false
}

# topic_on_disk reports whether every node holds a replica directory of every partition
# of payments.events (log.dirs/payments.events-<p>; a deleted topic's are renamed at once).
topic_on_disk() {
	local n p
	for n in "${CLUSTER_NODES[@]}"; do
		for ((p = 0; p < TOPIC_PARTITIONS; p++)); do
			[[ -d "$(node_dir "$n")/data/$TOPIC-$p" ]] || return 1
		done
	done
}

print_cluster() {
	local n
	echo "Kafka 4.4.0 cluster of three nodes (KRaft, each broker and controller)"
	for n in "${CLUSTER_NODES[@]}"; do
		echo "  node $n  DIRECT 127.0.0.1:$(direct_port "$n")  PROXIED 127.0.0.1:$(proxy_port "$n") (Toxiproxy kafka_cluster_$n)  pid $(node_pid "$n" || echo -)"
	done
	echo "  brokers  $(cluster_brokers)"
	echo "  topic    $TOPIC ($TOPIC_PARTITIONS partitions, replication factor 3, min.insync.replicas=2, unclean leader election off)"
	print_cluster_owner
}

# print_cluster_owner says how to stop the cluster: from this checkout, or from the one
# that started it (node 1's owner record), which this one leaves it to.
print_cluster_owner() {
	local by
	by="$(kafka_owner "$(direct_port 1)")" || by="$ROOT"
	if [[ "$by" != "$ROOT" ]]; then
		echo "Started from $by: this checkout uses it and will not stop it"
	fi
	echo "Stop it with: KAFKA_NODES=3 $by/scripts/stack/kafka.sh stop"
}

cluster_start() {
	mkdir -p "$CLUSTER_RUN"
	exec 9>"$CLUSTER_LOCK"
	flock -w 600 9 || die "another kafka.sh has held $CLUSTER_LOCK for 10 minutes"
	command -v java >/dev/null || die "java not found (Kafka 4 needs Java 17+)"
	command -v curl >/dev/null || die "curl not found (apt-get install curl)"
	local t0=$SECONDS n started=() out deadline by
	# A cluster another checkout started is used as is (its nodes are that checkout's to
	# start and stop).
	if by="$(kafka_owner "$(direct_port 1)")" && [[ "$by" != "$ROOT" ]]; then
		print_cluster
		return
	fi
	for n in "${CLUSTER_NODES[@]}"; do
		node_pid "$n" >/dev/null && continue
		require_free "$(direct_port "$n")" KAFKASTACK_CLUSTER_PORT "cluster node $n DIRECT listener"
		require_free "$(proxied_port "$n")" KAFKASTACK_CLUSTER_PORT "cluster node $n PROXIED listener"
		require_free "$(controller_port "$n")" KAFKASTACK_CLUSTER_PORT "cluster node $n CONTROLLER listener"
		started+=("$n")
	done
	ensure_libs
	cat >"$CLUSTER_RUN/admin.properties" <<-EOF
		request.timeout.ms=5000
		default.api.timeout.ms=10000
	EOF
	for n in "${started[@]}"; do
		render_node "$n"
		format_node "$n"
	done
	# All three at once: a node waits for a quorum of controllers before it serves.
	for n in "${started[@]}"; do
		log "starting node $n"
		launch_node "$n"
	done
	for n in "${CLUSTER_NODES[@]}"; do wait_node "$n"; done
	ensure_proxies
	LOG="$(node_dir 1)/kafka.log"
	deadline=$((SECONDS + READY_TIMEOUT))
	# A warm start skips the admin tool: its JVM took 5 to 13 s of a loaded machine just to
	# find the topic there. The topic exists if every node keeps a replica of every
	# partition on disk; a node answers on DIRECT only once it has caught up with the
	# cluster's metadata, so the three answering (wait_node) is the readiness check then.
	if ! topic_on_disk; then
		until out="$(ensure_cluster_topic 2>&1)"; do
			((SECONDS < deadline)) || die "the cluster did not become ready within ${READY_TIMEOUT}s: $out"
			sleep 0.5
		done
	fi
	log "ready in $((SECONDS - t0))s (${#started[@]} nodes started)"
	print_cluster
}

# cluster_stop stops the three nodes at once: one after the other, the last would lose
# its quorum and wait out STOP_TIMEOUT in a controlled shutdown that cannot finish.
# A cluster another checkout started is left running, its proxies too.
cluster_stop() {
	mkdir -p "$CLUSTER_RUN"
	local n ours=
	for n in "${CLUSTER_NODES[@]}"; do node_pid "$n" >/dev/null && ours=1; done
	if [[ -z "$ours" ]] && kafka_owner "$(direct_port 1)" >/dev/null; then
		print_cluster_owner
		return
	fi
	for n in "${CLUSTER_NODES[@]}"; do cluster_stop_node "$n" & done
	wait
	remove_proxies
}

# cluster_stop_node stops node n with SIGTERM (a controlled shutdown), SIGKILL after
# STOP_TIMEOUT seconds; the lock is per node, so stopping one never waits for another.
cluster_stop_node() {
	local n=$1 PIDFILE LOCK NAME
	NAME="Kafka node $n" PIDFILE="$(node_dir "$n")/kafka.pid" LOCK="$CLUSTER_RUN/node-$n.lock"
	stop_server "kafka.Kafka $(node_dir "$n")/server.properties"
}

cluster_kill_node() {
	local n=$1 p
	p="$(node_pid "$n")" || die "node $n is not running (or was not started from this checkout)"
	kill -KILL "$p"
	while kill -0 "$p" 2>/dev/null; do sleep 0.05; done
	echo "Kafka node $n killed (pid $p)"
}

cluster_start_node() {
	local n=$1 t0=$SECONDS
	if node_pid "$n" >/dev/null; then
		echo "Kafka node $n is already running"
		return
	fi
	[[ -f "$(node_dir "$n")/data/meta.properties" ]] || die "node $n was never formatted: run KAFKA_NODES=3 $0 start"
	launch_node "$n"
	wait_node "$n"
	echo "Kafka node $n answers on 127.0.0.1:$(direct_port "$n") after $((SECONDS - t0))s"
}

cluster_status() {
	local n down=0
	for n in "${CLUSTER_NODES[@]}"; do
		kafka_owner "$(direct_port "$n")" >/dev/null || down=$((down + 1))
	done
	if ((down > 0)); then
		echo "Kafka cluster: $down of 3 nodes do not answer as this project's brokers"
		return 1
	fi
	print_cluster
}

# hand_over runs the node verb "$@" with the scripts of the checkout that started the
# cluster, when that is another one: the chaos scenarios that kill, stop and start
# nodes run from whichever checkout shares the cluster, and only the owner's pid files
# and data directories name its nodes. The owner is read from any node that answers.
# KAFKASTACK_HANDED_FROM stops a hand-over from going round in circles.
hand_over() {
	local n by
	[[ -z "${KAFKASTACK_HANDED_FROM:-}" ]] || return 0
	for n in "${CLUSTER_NODES[@]}"; do
		node_pid "$n" >/dev/null && return 0 # ours
		by="$(kafka_owner "$(direct_port "$n")")" && break
	done
	[[ -n "${by:-}" && "$by" != "$ROOT" && -f "$by/scripts/stack/kafka.sh" ]] || return 0
	KAFKASTACK_HANDED_FROM="$ROOT" KAFKA_NODES=3 exec bash "$by/scripts/stack/kafka.sh" "$@"
}

cluster_main() {
	case "${1:-}" in
	kill-node | stop-node | start-node) check_node "${2:-}" && hand_over "$@" ;;
	esac
	case "${1:-}" in
	start) cluster_start ;;
	stop) cluster_stop ;;
	status) cluster_status ;;
	logs)
		check_node "${2:-}"
		LOG="$(node_dir "$2")/kafka.log"
		logs "${3:-}"
		;;
	brokers) cluster_brokers ;;
	kill-node) check_node "${2:-}" && cluster_kill_node "$2" ;;
	stop-node) check_node "${2:-}" && cluster_stop_node "$2" ;;
	start-node) check_node "${2:-}" && cluster_start_node "$2" ;;
	*)
		echo "usage: KAFKA_NODES=3 $0 start|stop|status|logs <n> [-f]|brokers|kill-node <n>|stop-node <n>|start-node <n>" >&2
		exit 2
		;;
	esac
}
