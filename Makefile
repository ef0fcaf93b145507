# Every target works on a fresh machine: scripts/setup.sh checks the tools it needs and
# installs the missing ones where apt-get exists, or names them with the command that
# installs them elsewhere (make setup-chaos before the chaos targets and the stack, which
# need only Go, PostgreSQL, Java and Maven; make setup before test and lint). The native stack
# (PostgreSQL, Kafka, Toxiproxy) is started by scripts/stack when it is needed. A stack
# already started from another checkout of this repository is used as is. Its ports are
# moved by the environment variables of scripts/stack/ports.sh (e.g. PGSTACK_PORT=55532
# when your own PostgreSQL holds 55432): export them, and every target follows.
# `make help` lists the targets.

SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
SCENARIO  ?= default
# The relay the chaos scenarios run our API with: poll or cdc (RELAY_MODE of cmd/api).
RELAY_MODE ?= poll
STACK_PG  := scripts/stack/postgres.sh
STACK_KF  := scripts/stack/kafka.sh
STACK_TP  := scripts/stack/toxiproxy.sh
PG_URL     = $(shell bash $(STACK_PG) url)
KAFKA_URL  = $(or $(KAFKA_BROKERS),$(shell bash $(STACK_KF) brokers))
API_DB     = $(or $(DATABASE_URL),$(patsubst %/postgres?sslmode=disable,%/payments?sslmode=disable,$(PG_URL)))
FRAUD_DB   = $(or $(CONSUMER_DATABASE_URL),$(patsubst %/postgres?sslmode=disable,%/antifraud?sslmode=disable,$(PG_URL)))

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

## ---- set-up -------------------------------------------------------------------

.PHONY: setup
setup: ## Install what make test needs and is missing (setup-chaos's tools, promtool, Node.js, Python venv, Chromium, pgbench); fast when all are present
	@bash scripts/setup.sh

.PHONY: setup-chaos
setup-chaos: ## Install what make chaos needs and is missing (Go, PostgreSQL 14-17, Java 17+, Maven, the stack scripts' commands); elsewhere than apt, print the install command
	@bash scripts/setup.sh chaos

# chaos-example (and so chaos-mutants) adds Python's venv, bench adds pgbench: one run of
# setup.sh each, so that one message names everything that is missing.
.PHONY: setup-example setup-bench
setup-example:
	@bash scripts/setup.sh chaos python
setup-bench:
	@bash scripts/setup.sh chaos pgbench

## ---- native stack -------------------------------------------------------------

.PHONY: stack-up
stack-up: setup-chaos ## Start PostgreSQL, Kafka and Toxiproxy natively (idempotent)
	@bash $(STACK_PG) start
	@bash $(STACK_KF) start
	@bash $(STACK_TP) start

.PHONY: stack-down
stack-down: ## Stop the native stack this checkout started (data is kept in .stack/)
	@bash $(STACK_TP) stop || true
	@bash $(STACK_KF) stop || true
	@bash $(STACK_PG) stop || true

.PHONY: stack-status
stack-status: ## Show what the native stack runs
	@bash $(STACK_PG) status || true
	@bash $(STACK_KF) status || true
	@bash $(STACK_TP) status || true

# The three-node Kafka cluster (KRaft, RF 3, min.insync.replicas=2) runs beside the single
# broker, on ports of its own; the cluster chaos scenarios start it when they need it.
CLUSTER_BROKERS = $(shell KAFKA_NODES=3 bash $(STACK_KF) brokers)

.PHONY: cluster-up
cluster-up: setup-chaos ## Start the three-node Kafka cluster beside the single broker (about 0.35 GiB per node; under a minute warm on 2 cores)
	@bash $(STACK_TP) start >/dev/null
	@KAFKA_NODES=3 bash $(STACK_KF) start

.PHONY: cluster-down
cluster-down: ## Stop the three-node Kafka cluster (data kept in .stack/kafka-cluster)
	@KAFKA_NODES=3 bash $(STACK_KF) stop

# PostgreSQL's standby (PG_NODES=2 scripts/stack/postgres.sh): a synchronous hot standby
# of this checkout's server, on PGSTACK_STANDBY_PORT; promote and rebuild move the primary
# between the two (docs/runbook.md, PostgresPrimaryChanged).
.PHONY: pg-standby pg-promote pg-rebuild
pg-standby: setup-chaos ## Add a synchronous standby to this checkout's PostgreSQL
	@PG_NODES=2 bash $(STACK_PG) start
pg-promote: ## Stop PostgreSQL's primary and promote its standby
	@PG_NODES=2 bash $(STACK_PG) promote
pg-rebuild: ## Make the old primary the new primary's standby (a fresh base backup)
	@PG_NODES=2 bash $(STACK_PG) rebuild

.PHONY: databases
databases:
	@bash $(STACK_PG) start >/dev/null
	@for db in payments antifraud; do \
		psql -q "$(PG_URL)" -tAc "SELECT 1 FROM pg_database WHERE datname = '$$db'" | grep -q 1 || \
		psql -q "$(PG_URL)" -c "CREATE DATABASE $$db"; \
	done

## ---- run ------------------------------------------------------------------------

.PHONY: migrate
migrate: databases ## Apply the migrations of both services
	$(GO) run ./cmd/api migrate --database-url "$(API_DB)"
	$(GO) run ./cmd/consumer migrate --database-url "$(FRAUD_DB)"

.PHONY: run-api
run-api: databases ## Run the API and its relay on :8080 against the native stack, with a new API key
	@bash $(STACK_KF) start
	@echo "API key of merchant dev (shown once; send it as Authorization: Bearer <api_key>):"
	@DATABASE_URL="$(API_DB)" $(GO) run ./cmd/api keys create --merchant dev
	DATABASE_URL="$(API_DB)" KAFKA_BROKERS="$(KAFKA_URL)" $(GO) run ./cmd/api

.PHONY: run-consumer
run-consumer: databases ## Run the antifraud consumer on :8081 against the native stack
	@bash $(STACK_KF) start
	DATABASE_URL="$(FRAUD_DB)" KAFKA_BROKERS="$(KAFKA_URL)" $(GO) run ./cmd/consumer

## ---- check ----------------------------------------------------------------------

.PHONY: test
test: setup stack-up lint check-openapi ## Run all tests against real PostgreSQL and Kafka, and every check
	$(GO) test -race -count=1 -timeout 20m ./...

.PHONY: lint
lint: setup ## Static checks: go vet, alert rules (promtool), k6 scripts (tsc), sequence diagram (mermaid)
	$(GO) vet ./...
	promtool check config deploy/prometheus/prometheus.yml
	promtool test rules deploy/prometheus/alerts_test.yml
	bash scripts/check-k6.sh
	bash scripts/check-mermaid.sh

.PHONY: check-openapi
check-openapi: ## Fuzz the real API from docs/openapi.yaml with schemathesis (pinned, installed into .stack/)
	GO="$(GO)" bash scripts/check-openapi.sh

# The benchmarks make bench runs, in this order: each writes its figures into
# reports/bench.json (generated, not tracked). The ladder and the scale curve have targets
# of their own. When the three-node cluster answers, the relay is measured on it too, in
# the same run (KAFKA_CLUSTER_BROKERS; docs/bench.md).
BENCH_DEFAULT := api cdc consumer relay
BENCH_CLUSTER  = KAFKA_CLUSTER_BROKERS="$${KAFKA_CLUSTER_BROKERS-$$(KAFKA_NODES=3 bash $(STACK_KF) status >/dev/null 2>&1 && echo $(CLUSTER_BROKERS))}"

.PHONY: bench
bench: setup-bench stack-up ## The API, CDC, consumer and relay benchmarks, default repetitions (9 min on 2 cores at load 4 to 8, about 3 min each for the API, CDC and relay benchmarks); writes reports/bench.json
	$(BENCH_CLUSTER) $(GO) run ./cmd/bench $(BENCH_DEFAULT)

.PHONY: bench-ladder
bench-ladder: stack-up ## What each of the relay's guarantees costs in the database alone, no Kafka (3 to 6 min); writes reports/bench.json
	$(GO) run ./cmd/bench ladder

.PHONY: bench-scale
bench-scale: stack-up ## Both relays against backlogs up to 1,000,000 and histories up to 10,000,000 rows, 3 repetitions (45 min on a quiet 2-core machine, hours on a busy one; about 15 GB of disk); writes reports/bench.json
	$(GO) run ./cmd/bench scale

.PHONY: bench-promote
bench-promote: ## Merge the figures of reports/bench.json into docs/bench.json, the figures docs/bench.md cites (commit it with the docs that quote them)
	$(GO) run ./cmd/bench promote

## ---- chaos ----------------------------------------------------------------------

# CHAOS_FLAGS passes flags to cmd/chaos, e.g. to check a student's service:
#   make chaos CHAOS_FLAGS="-api-url http://127.0.0.1:9090 -payments-db postgres://... -topic ..."
CHAOS_FLAGS ?=

.PHONY: chaos
chaos: setup-chaos ## Run a chaos scenario (SCENARIO=default|dual-write|kafka-down|relay-crash|consumer-crash|consumer-rebalance|replica-pause|hostile-records|clock-skew|poison|dlq-replay|pg-faults|commit-refused|idempotency-storm|consumer-db|long-transaction|broker-failover|partition-offline|rolling-restart|pg-failover|pg-failover-async|db-restart; RELAY_MODE=poll|cdc; CHAOS_FLAGS=...); writes reports/chaos-<scenario>.json and .html
	$(GO) run ./cmd/chaos -scenario $(SCENARIO) -relay-mode $(RELAY_MODE) $(CHAOS_FLAGS)

.PHONY: chaos-prepare
chaos-prepare: setup-chaos ## Make empty databases and a fresh topic to check a student's service; prints their names
	@$(GO) run ./cmd/chaos prepare

.PHONY: chaos-example
chaos-example: setup-example ## Check examples/python-outbox, a service written from docs/contract.md alone (2 to 4 min)
	GO="$(GO)" bash examples/python-outbox/run.sh

.PHONY: chaos-all
chaos-all: setup-chaos ## Run every chaos scenario (-scenario all: chaos.ScenarioNames) with each relay (poll, then cdc), the cluster ones on the three-node cluster (started if needed, stopped after); prints the verdicts side by side and writes reports/index.html
	$(GO) run ./cmd/chaos -scenario all -relay-mode both $(CHAOS_FLAGS)

.PHONY: chaos-html
chaos-html: ## Rebuild reports/chaos-*.html and reports/index.html from the JSON reports (no run)
	$(GO) run ./cmd/chaos html

.PHONY: chaos-sample
# The one run the repository keeps, for readers who have not run anything: a default run
# (it must PASS, or cmd/chaos exits non-zero and nothing is copied), its JSON and page in
# docs/sample, and the README's pictures in docs/images, taken by the Chromium test of
# internal/chaos/timeline from that sample and the recorded dual-write run of its
# testdata. internal/chaos's TestSampleRowsMatchTheHarness fails when the sample's verdict
# rows are no longer the ones the harness writes; this target is the fix.
chaos-sample: setup ## Run the default scenario and keep it as docs/sample (JSON and page), with the README's screenshots in docs/images
	$(GO) run ./cmd/chaos -scenario default -relay-mode poll
	cp reports/chaos-default.json docs/sample/chaos-default.json
	$(GO) run ./cmd/chaos html -dir docs/sample
	$(GO) test -count=1 -run TestChromiumRendersTheReports ./internal/chaos/timeline -screenshots $(CURDIR)/docs/images

# MUTANTS_FLAGS passes flags to cmd/mutants, e.g. MUTANTS_FLAGS="-mutant 06,09 -short -all".
MUTANTS_FLAGS ?=

.PHONY: chaos-mutants
# The contract's own test goes first: examples/python-outbox, written from docs/contract.md
# alone, must PASS with its Kafka client's default timeouts before the mutants that the
# same harness must FAIL mean anything.
chaos-mutants: chaos-example ## Run the mutation suite: each bug of mutants/ against the scenarios that should catch it; writes reports/mutants.json
	$(GO) run ./cmd/mutants $(MUTANTS_FLAGS)

## ---- Docker (needs a Docker engine) ---------------------------------------------

.PHONY: up
up: ## docker compose up the whole stack (Docker)
	docker compose -f deploy/docker-compose.yml up -d --build --wait

.PHONY: down
down: ## docker compose down (Docker)
	docker compose -f deploy/docker-compose.yml down -v

.PHONY: logs
logs: ## Follow the compose stack's logs (Docker)
	docker compose -f deploy/docker-compose.yml logs -f
