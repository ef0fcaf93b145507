#!/usr/bin/env bash
# Checks the Python service against `make chaos` in black-box mode, the way a mentor
# checks a student's: for each scenario, fresh databases and topic (chaos prepare), the
# service's own migrations, its API and consumer started in the background, one chaos
# run, then everything stopped and removed. Exits non-zero unless every scenario passed.
#
#   bash examples/python-outbox/run.sh [scenario ...]     (default: default kafka-down)
#
# Needs the native stack (started if it is not running) and python3 with venv. It runs
# on the native stack whether Docker runs or not: the Python service runs on the host.
set -euo pipefail

case ${STACK:-} in
'') echo "stack: native (the default: the Python service runs on the host, against the native stack)" ;;
native) echo "stack: native (STACK=native)" ;;
*)
	echo "run.sh: STACK=$STACK: the Python example runs on the native stack only (its services run on the host); unset STACK" >&2
	exit 2
	;;
esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
GO=${GO:-go}
venv=$root/.stack/python-outbox
scenarios=("$@")
[[ ${#scenarios[@]} -gt 0 ]] || scenarios=(default kafka-down)

# The pinned dependencies, installed again only when requirements.txt changes.
if ! cmp -s "$here/requirements.txt" "$venv/requirements.txt" 2>/dev/null; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
	cp "$here/requirements.txt" "$venv/requirements.txt"
fi
py=$venv/bin/python

free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_healthy() { # url name log
	for _ in $(seq 1 100); do
		curl -fsS "$1/healthz" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "run.sh: $2 did not answer $1/healthz; its log:" >&2
	cat "$3" >&2
	return 1
}

api_pid= consumer_pid= NAME=
stop_service() { # pid
	[[ -n $1 ]] || return 0
	kill -TERM "$1" 2>/dev/null || true
	for _ in $(seq 1 150); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$1" 2>/dev/null || true
}
clean_up() {
	stop_service "$api_pid"
	stop_service "$consumer_pid"
	api_pid= consumer_pid=
	if [[ -n $NAME ]]; then
		"$GO" run ./cmd/chaos prepare -drop "$NAME" || echo "run.sh: could not remove $NAME" >&2
		NAME=
	fi
}
trap clean_up EXIT

status=0
for scenario in "${scenarios[@]}"; do
	eval "$("$GO" run ./cmd/chaos prepare)"
	logs=$venv/logs/$NAME
	mkdir -p "$logs"
	DATABASE_URL=$PAYMENTS_DB "$py" "$here/api.py" migrate
	DATABASE_URL=$CONSUMER_DB "$py" "$here/consumer.py" migrate

	api_addr=127.0.0.1:$(free_port)
	consumer_addr=127.0.0.1:$(free_port)
	DATABASE_URL=$CONSUMER_DB KAFKA_BROKERS=$CONSUMER_BROKERS KAFKA_TOPIC=$TOPIC KAFKA_GROUP=antifraud-$NAME \
		HTTP_ADDR=$consumer_addr "$py" "$here/consumer.py" >"$logs/consumer.log" 2>&1 &
	consumer_pid=$!
	DATABASE_URL=$PAYMENTS_DB KAFKA_BROKERS=$RELAY_BROKERS KAFKA_TOPIC=$TOPIC \
		HTTP_ADDR=$api_addr "$py" "$here/api.py" >"$logs/api.log" 2>&1 &
	api_pid=$!
	wait_healthy "http://$consumer_addr" consumer "$logs/consumer.log"
	wait_healthy "http://$api_addr" api "$logs/api.log"

	echo "== python-outbox, scenario $scenario (logs: $logs)"
	"$GO" run ./cmd/chaos -scenario "$scenario" -api-url "http://$api_addr" \
		-payments-db "$PAYMENTS_DB" -consumer-db "$CONSUMER_DB" -topic "$TOPIC" || {
		status=1
		echo "run.sh: kept for inspection: databases ${NAME}_payments, ${NAME}_antifraud, topic $NAME; logs $logs"
		echo "run.sh: remove them with: go run ./cmd/chaos prepare -drop $NAME"
		NAME=
	}
	clean_up
done
exit "$status"
