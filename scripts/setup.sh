#!/usr/bin/env bash
# setup.sh: checks that the tools a make target needs are installed; installs the missing
# ones where apt-get exists, and elsewhere names them with the command that installs them.
#
#   scripts/setup.sh [group...]     (no group: all of them, what make test needs)
#
# Groups:
#   chaos    make chaos and the other chaos targets, stack-up, bench: Go, a PostgreSQL
#            server of a major from 14 to 17 (scripts/setup-lib.sh says where it looks),
#            Java 17 or newer, Maven unless Kafka's jars are already in .stack/kafka-libs,
#            and what scripts/stack calls: curl, flock, setsid, ss (Linux), timeout,
#            sha256sum, md5sum, od, git; as root also runuser and the postgres user, who
#            runs the server (PostgreSQL refuses to run as root).
#   python   Python 3 with venv (examples/python-outbox, scripts/check-openapi.sh)
#   pgbench  pgbench (make bench)
#   test     what make test and lint add: promtool, Node.js and npm, Chromium, psql
#
# Fast and silent when everything is present: each tool is probed by a command or a path,
# nothing asks for sudo, nothing is downloaded. Where apt-get exists, the missing packages
# are installed in one apt-get install (apt-get update once, first; sudo only when not root).
# Elsewhere (macOS, Fedora, Arch, ...) it prints every missing tool and the one command
# that installs them all, and exits 1 without installing anything. So does it with apt-get
# when a tool has no suitable Debian package (Go: Debian's golang is older than go.mod's).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$here/.." && pwd)"
source "$here/setup-lib.sh"

started=$(date +%s)
say() { echo "setup: $* (+$(($(date +%s) - started))s)"; }
have() { command -v "$1" >/dev/null 2>&1; }

# ---- what is missing ------------------------------------------------------------------
# MISSING_NEEDS holds one key per missing thing (pkg_names maps it to packages),
# MISSING_WHAT the line that tells the user what it is.
MISSING_NEEDS=() MISSING_WHAT=()
missing() { MISSING_NEEDS+=("$1") MISSING_WHAT+=("$2"); }

# go_ok succeeds when go can build this module: its version is at least go.mod's, or at
# least 1.21 with toolchain switching on (it then fetches go.mod's toolchain itself).
go_ok() {
	local have_v want_v
	have go || return 1
	have_v="$(go version)" && [[ "$have_v" =~ go([0-9]+)\.([0-9]+) ]] || return 1
	have_v=$((BASH_REMATCH[1] * 1000 + BASH_REMATCH[2]))
	[[ "$(<"$ROOT/go.mod")" =~ $'\n'go\ ([0-9]+)\.([0-9]+) ]] || return 0
	want_v=$((BASH_REMATCH[1] * 1000 + BASH_REMATCH[2]))
	((have_v >= want_v)) && return
	((have_v >= 1021)) && [[ "$(go env GOTOOLCHAIN)" != local ]]
}

# kafka_jars_fetched succeeds when scripts/stack/kafka.sh has already copied the jars of
# the pom it has now (its stamp), so that Maven is not needed.
kafka_jars_fetched() {
	local stamp="$ROOT/.stack/kafka-libs/.pom.sha256"
	[[ -f "$stamp" ]] && have sha256sum &&
		[[ "$(<"$stamp")" == "$(sha256sum "$ROOT/scripts/stack/kafka/pom.xml" | cut -d' ' -f1)" ]]
}

check_chaos() {
	local major tool
	go_ok || missing go "Go $(sed -n 's/^go //p' "$ROOT/go.mod") or newer (go.mod)"
	if pg_find; then
		# As root, postgres.sh runs the server as the postgres user (the server packages
		# create it); it is checked only when no server package is about to be installed.
		if [[ "$(id -u)" == 0 ]] && ! id postgres >/dev/null 2>&1; then
			missing postgres-user "the postgres user (root runs the PostgreSQL server as it)"
		fi
	else
		missing postgresql "a PostgreSQL server, major $PG_MIN to $PG_MAX${PG_REFUSED:+ (refused: $PG_REFUSED)}"
	fi
	if ! major="$(java_major)"; then
		missing java "Java $JAVA_MIN or newer (Kafka 4)"
	elif ((major < JAVA_MIN)); then
		missing java "Java $JAVA_MIN or newer (Kafka 4; found Java $major at $(command -v java))"
	fi
	kafka_jars_fetched || have mvn || missing maven "Maven (fetches Kafka's jars once, into .stack/kafka-libs)"
	have curl || missing curl curl
	for tool in flock setsid; do have "$tool" || missing util-linux "$tool"; done
	if [[ "$(id -u)" == 0 ]]; then have runuser || missing util-linux runuser; fi
	if [[ "$(os_family)" != macos ]]; then have ss || missing iproute ss; fi
	for tool in timeout sha256sum md5sum od; do have "$tool" || missing coreutils "$tool"; done
	have git || missing git git
}

check_python() {
	# Debian splits venv (and ensurepip, which venv needs) out of python3.
	if ! have python3; then
		missing python "python3 with venv"
	elif ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
		missing python "python3's venv module"
	fi
}

check_pgbench() { have pgbench || missing pgbench pgbench; }

check_test() {
	have psql || missing psql psql
	have promtool || missing promtool "promtool (Prometheus)"
	have node || missing node "Node.js"
	have npm || missing npm npm
	have chromium || have chromium-browser || missing chromium Chromium
}

# ---- package names --------------------------------------------------------------------

# pkg_names prints the packages of family $1 that provide need $2, nothing when no
# package manager of that family has a suitable one (then manual_line says what to do).
pkg_names() {
	case "$1:$2" in
	*:go) case "$1" in fedora) echo golang ;; arch | macos) echo go ;; esac ;;
	debian:postgresql) echo "${APT_POSTGRESQL:-postgresql}" ;;
	fedora:postgresql) echo postgresql-server postgresql-contrib ;;
	arch:postgresql) echo postgresql ;;
	macos:postgresql) echo "postgresql@$PG_MAX" ;;
	debian:java) echo "${APT_JAVA:-openjdk-17-jre-headless}" ;;
	fedora:java) echo java-21-openjdk-headless ;;
	arch:java) echo jre21-openjdk-headless ;;
	macos:java) echo openjdk@21 ;;
	other:java) echo openjdk ;;
	*:postgres-user) ;;
	debian:iproute | arch:iproute) echo iproute2 ;;
	fedora:iproute) echo iproute ;;
	debian:python) echo python3 python3-venv ;;
	fedora:python) echo python3 ;;
	arch:python) echo python ;;
	macos:python) echo python3 ;;
	debian:pgbench | debian:psql) echo postgresql-client ;;
	fedora:pgbench) echo postgresql-contrib ;;
	fedora:psql) echo postgresql ;;
	arch:pgbench | arch:psql) echo postgresql ;;
	macos:pgbench | macos:psql) echo "postgresql@$PG_MAX" ;;
	debian:promtool | arch:promtool | macos:promtool) echo prometheus ;;
	fedora:promtool) echo golang-github-prometheus ;;
	macos:node | macos:npm) echo node ;;
	*:node) echo nodejs ;;
	macos:chromium) ;; # a cask: see manual_line
	*) echo "$2" ;;
	esac
}

# manual_line prints how to get need $2 on family $1 when pkg_names has nothing for it.
manual_line() {
	case "$1:$2" in
	*:go) echo "Go: https://go.dev/dl (the distribution's golang package is often older than go.mod's go)" ;;
	*:postgres-user) echo "the postgres user: sudo useradd --system --create-home postgres" ;;
	macos:chromium) echo "Chromium: brew install --cask chromium" ;;
	esac
}

# install_command prints the command that installs packages "$@" on family $1.
install_command() {
	local family=$1
	shift
	case "$family" in
	debian) echo "sudo apt-get install -y --no-install-recommends $*" ;;
	fedora) echo "sudo dnf install -y $*" ;;
	arch) echo "sudo pacman -S --needed $*" ;;
	macos) echo "brew install $*" ;;
	*) echo "your package manager: $* (the usual package names)" ;;
	esac
}

# packages_for sets PKGS to the packages of family $1 for every missing need
# (deduplicated, in order) and MANUAL to the lines of the needs no package provides, one
# per line. Strings, not arrays: macOS's bash 3.2 calls an empty array unbound under set -u.
PKGS= MANUAL=
packages_for() {
	local family=$1 need pkg names line seen=" "
	PKGS= MANUAL=
	for need in "${MISSING_NEEDS[@]}"; do
		names="$(pkg_names "$family" "$need")"
		if [[ -z "$names" ]]; then
			line="$(manual_line "$family" "$need")"
			[[ "$MANUAL" == *"$line"* ]] || MANUAL+="  $line"$'\n'
			continue
		fi
		for pkg in $names; do
			[[ "$seen" == *" $pkg "* ]] && continue
			seen+="$pkg "
			PKGS+="${PKGS:+ }$pkg"
		done
	done
}

# report prints every missing tool and what installs them on family $1, to stderr.
report() {
	local family=$1 i
	packages_for "$family"
	{
		echo "setup: missing on this machine ($(family_name "$family")):"
		for i in "${!MISSING_WHAT[@]}"; do echo "  - ${MISSING_WHAT[$i]}"; done
		echo "Install them with:"
		[[ -z "$PKGS" ]] || echo "  $(install_command "$family" "$PKGS")"
		printf '%s' "$MANUAL"
		if [[ "$family" == macos ]]; then keg_only_path "$PKGS"; fi
		echo "then run make again."
	} >&2
}

family_name() {
	case "$1" in
	debian) echo "Debian or Ubuntu" ;;
	fedora) echo "Fedora or RHEL" ;;
	arch) echo "Arch Linux" ;;
	macos) echo macOS ;;
	*) echo "${SETUP_UNAME:-$(uname -s)}, no known package manager" ;;
	esac
}

# keg_only_path prints the PATH line for the Homebrew packages among "$1" that brew does
# not link into its bin (postgres.sh finds postgresql@N by itself; java, flock, setsid
# and psql are looked up on PATH).
keg_only_path() {
	local dirs=() pkg
	for pkg in $1; do
		case "$pkg" in
		openjdk@* | util-linux | postgresql@*) dirs+=("\$(brew --prefix $pkg)/bin") ;;
		esac
	done
	((${#dirs[@]} == 0)) || echo "  export PATH=\"$(
		IFS=:
		echo "${dirs[*]}"
	):\$PATH\"   (these are keg-only)"
}

# ---- apt-get --------------------------------------------------------------------------

# apt_pick prints the package "<prefix>N<suffix>" for the major N to install: the one the
# distribution's meta-package $1 depends on when N is in $4..$5, else the newest in range
# that apt has a candidate for. Needs apt-get update first.
apt_pick() {
	local meta=$1 prefix=$2 suffix=$3 min=$4 max=$5 n
	n="$(apt-cache depends "$meta" 2>/dev/null | sed -n "s/^ *Depends: $prefix\([0-9]*\)$suffix\$/\1/p" | head -n 1)"
	if [[ -n "$n" ]] && ((n >= min && n <= max)); then
		echo "$prefix$n$suffix"
		return
	fi
	for ((n = max; n >= min; n--)); do
		if [[ "$(apt-cache policy "$prefix$n$suffix" 2>/dev/null | sed -n 's/^ *Candidate: //p')" =~ ^[0-9] ]]; then
			echo "$prefix$n$suffix"
			return
		fi
	done
	return 1
}

apt_install() {
	local sudo=()
	if [[ "$(id -u)" != 0 ]]; then
		if ! have sudo; then
			report debian
			echo "setup: not root and no sudo: ask an administrator to run the command above" >&2
			exit 1
		fi
		sudo=(sudo)
	fi
	say "apt-get update"
	"${sudo[@]}" apt-get update -qq
	if [[ " ${MISSING_NEEDS[*]} " == *" postgresql "* ]]; then
		APT_POSTGRESQL="$(apt_pick postgresql postgresql- '' "$PG_MIN" "$PG_MAX")" ||
			{ echo "setup: apt has no PostgreSQL server of a major from $PG_MIN to $PG_MAX" >&2; exit 1; }
	fi
	if [[ " ${MISSING_NEEDS[*]} " == *" java "* ]]; then
		APT_JAVA="$(apt_pick default-jre-headless openjdk- -jre-headless "$JAVA_MIN" 25)" ||
			{ echo "setup: apt has no Java $JAVA_MIN or newer (openjdk-N-jre-headless)" >&2; exit 1; }
	fi
	packages_for debian
	say "installing $PKGS"
	# shellcheck disable=SC2086 # one word per package
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
}

# ---- main -----------------------------------------------------------------------------

groups=("$@")
((${#groups[@]} > 0)) || groups=(chaos python pgbench test)
run_checks() {
	local group
	MISSING_NEEDS=() MISSING_WHAT=()
	for group in "${groups[@]}"; do
		case "$group" in
		chaos | python | pgbench | test) "check_$group" ;;
		*) echo "usage: $0 [chaos|python|pgbench|test]..." >&2; exit 2 ;;
		esac
	done
}

run_checks
((${#MISSING_NEEDS[@]} > 0)) || exit 0

family="$(os_family)"
if ! have apt-get; then
	report "$family"
	exit 1
fi
# With apt-get, what no Debian package provides stops the run before anything is installed.
packages_for debian
if [[ -n "$MANUAL" ]]; then
	report debian
	exit 1
fi
apt_install
run_checks
if ((${#MISSING_NEEDS[@]} > 0)); then
	echo "setup: still missing after apt-get install:" >&2
	printf '  - %s\n' "${MISSING_WHAT[@]}" >&2
	exit 1
fi
say "done: go $(go version | awk '{print $3}'), PostgreSQL ${PG_FOUND_MAJOR:-?}, java $(java_major 2>/dev/null || echo '?')"
