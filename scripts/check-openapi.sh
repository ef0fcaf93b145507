#!/usr/bin/env bash
# check-openapi.sh: fuzzes the real API from docs/openapi.yaml with schemathesis and fails
# on any answer the spec does not promise (`make check-openapi`, part of `make test`).
#
#   1. installs the pinned schemathesis into a venv in .stack/schemathesis (once);
#   2. runs TestOpenAPIFuzz (docs/fuzz_test.go), which builds cmd/api and runs it on a
#      fresh payments database, a Kafka topic of its own and a free port, with an
#      ADMIN_TOKEN so that the admin endpoints are fuzzed too; then runs schemathesis
#      with docs/schemathesis.toml against it, stops the API and drops the database and
#      the topic (the database is kept, and named, when the run fails).
#
# The servers are the test suite's: DATABASE_URL (an admin URL) and KAFKA_BROKERS when
# set, otherwise the native stack of scripts/stack, started on first use.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=4.32.5
VENV="$ROOT/.stack/schemathesis"

if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -qF "version $VERSION"; then
	echo "check-openapi: installing schemathesis $VERSION into ${VENV#"$ROOT"/}"
	rm -rf "$VENV"
	python3 -m venv "$VENV" ||
		{ echo "check-openapi: python3 -m venv failed: install Python 3 with venv (Debian: apt-get install python3-venv)" >&2; exit 1; }
	"$VENV/bin/pip" install --quiet "schemathesis==$VERSION"
fi

cd "$ROOT"
SCHEMATHESIS="$VENV/bin/schemathesis" "${GO:-go}" test -count=1 -run '^TestOpenAPIFuzz$' -v ./docs
