#!/usr/bin/env bash
# setup.sh: installs the system packages that make test, make chaos and make bench need and
# that are missing: PostgreSQL 15, Java 17 and Maven (the native Kafka), promtool (alert
# rules), Node.js and npm (the k6 and Mermaid checks), curl and ss (the stack scripts), and
# Python 3 with venv (scripts/check-openapi.sh installs schemathesis into a venv), and
# Chromium (the test of the chaos timeline report opens it headless and takes a screenshot).
#
# Idempotent and fast when everything is present: each package is probed by a command or
# a path first, and apt-get runs only for what is missing (apt-get update once, first).
# `make setup` runs it, and every target that needs these depends on that; .ci/run calls
# make test and so goes through it too. The npm packages of tools/ are not installed here:
# scripts/npm-tools.sh installs them from the lockfile when a check first needs them.
set -euo pipefail

started=$(date +%s)
say() { echo "setup: $* (+$(($(date +%s) - started))s)"; }

apt_updated=
need_pkg() { # need_pkg <command-or-path> <debian package>...
	local probe=$1
	shift
	if [[ -e "$probe" ]] || command -v "$probe" >/dev/null 2>&1; then return; fi
	if ! command -v apt-get >/dev/null; then
		echo "setup: $probe is missing and there is no apt-get here: install $* by hand" >&2
		exit 1
	fi
	local sudo=()
	[[ "$(id -u)" == 0 ]] || sudo=(sudo)
	if [[ -z "$apt_updated" ]]; then
		say "apt-get update"
		"${sudo[@]}" apt-get update -qq
		apt_updated=1
	fi
	say "installing $*"
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

need_pkg curl curl
need_pkg ss iproute2
need_pkg /usr/lib/postgresql/15/bin/initdb postgresql-15
need_pkg pgbench postgresql-client-15
need_pkg java openjdk-17-jre-headless
need_pkg mvn maven
need_pkg promtool prometheus
need_pkg node nodejs
need_pkg npm npm
need_pkg python3 python3 python3-venv
# Debian splits venv out of python3: a python3 without it cannot make the schemathesis venv.
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
	need_pkg /nonexistent-python3-venv python3-venv
fi
need_pkg chromium chromium

if [[ -n "$apt_updated" ]]; then
	say "go $(go version | awk '{print $3}'), java $(java -version 2>&1 | head -1 | awk '{print $3}'), node $(node -v)"
fi
