# ports.sh: every TCP port of the native stack (all on 127.0.0.1), each with the variable
# that moves it and its default. lib.sh sources it; internal/devstack (ports.go) reads the
# same variables with the same defaults, and deploy/ports_test.go checks that the two agree.
#
# A checkout whose ports are taken by something else (your own PostgreSQL on 55432,
# another Kafka on 19092) runs its own stack beside it when started with other ports, e.g.
#   PGSTACK_PORT=55532 make test
# and every command of that shell (make, go test, go run ./cmd/chaos) must see the same
# variables, so export them.

# PostgreSQL (postgres.sh).
PGSTACK_PORT="${PGSTACK_PORT:-55432}"
# PostgreSQL's standby (PG_NODES=2 postgres.sh), the primary after a promotion.
PGSTACK_STANDBY_PORT="${PGSTACK_STANDBY_PORT:-55433}"
# Kafka's DIRECT listener: tests, the consumer, the chaos verifier (kafka.sh).
KAFKASTACK_DIRECT_PORT="${KAFKASTACK_DIRECT_PORT:-19092}"
# Kafka's KRaft controller listener.
KAFKASTACK_CONTROLLER_PORT="${KAFKASTACK_CONTROLLER_PORT:-19093}"
# Kafka's PROXIED listener, bound here and advertised as KAFKASTACK_PROXY_PORT.
KAFKASTACK_PROXIED_PORT="${KAFKASTACK_PROXIED_PORT:-19094}"
# Kafka's SASL_SSL listener (TLS, SCRAM users): what the clients' KAFKA_TLS_* and
# KAFKA_SASL_* options are tested against (kafka.sh sasl-env prints them).
KAFKASTACK_SASL_SSL_PORT="${KAFKASTACK_SASL_SSL_PORT:-19095}"
# Toxiproxy's proxy kafka_relay, in front of PROXIED: the relay's seed under chaos.
KAFKASTACK_PROXY_PORT="${KAFKASTACK_PROXY_PORT:-29092}"
# Toxiproxy's proxy postgres_api, in front of PostgreSQL (the pg-faults scenario).
PGSTACK_PROXY_PORT="${PGSTACK_PROXY_PORT:-25432}"
# Toxiproxy's proxy postgres_consumer, in front of PostgreSQL (the consumer-db scenario).
PGSTACK_CONSUMER_PROXY_PORT="${PGSTACK_CONSUMER_PROXY_PORT:-25433}"
# Toxiproxy's API (toxiproxy.sh).
TOXISTACK_API_PORT="${TOXISTACK_API_PORT:-8474}"
# The three-node cluster (KAFKA_NODES=3 kafka.sh): node n (1 to 3) has DIRECT on
# base+n, PROXIED on base+100+n, its Toxiproxy proxy on base+200+n and CONTROLLER on
# base+300+n, so one variable moves all twelve.
KAFKASTACK_CLUSTER_PORT="${KAFKASTACK_CLUSTER_PORT:-21190}"

STACK_PORT_VARS=(PGSTACK_PORT PGSTACK_STANDBY_PORT KAFKASTACK_DIRECT_PORT KAFKASTACK_CONTROLLER_PORT
	KAFKASTACK_PROXIED_PORT KAFKASTACK_SASL_SSL_PORT KAFKASTACK_PROXY_PORT PGSTACK_PROXY_PORT PGSTACK_CONSUMER_PROXY_PORT TOXISTACK_API_PORT
	KAFKASTACK_CLUSTER_PORT)
