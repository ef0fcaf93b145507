# pgbin.sh: where the PostgreSQL server binaries are, sourced by postgres.sh and by
# scripts/setup.sh, so that the server set-up accepts is the one postgres.sh starts.
# Only definitions: sourcing it runs nothing.
#
# SETUP_FS_ROOT (tests only) is put in front of the usual places' paths, so that a test
# can lay out servers of any major in a scratch tree.

# The PostgreSQL majors the project supports; CI runs the one of its Debian release.
PG_MIN=14
PG_MAX=17

# pg_major prints the major version of the server binaries in directory $1.
pg_major() {
	local out
	[[ -x "$1/initdb" ]] || return 1
	out="$("$1/initdb" --version 2>/dev/null)" || return 1
	[[ "$out" =~ \(PostgreSQL\)\ ([0-9]+) ]] || return 1
	echo "${BASH_REMATCH[1]}"
}

# pg_accept succeeds when directory $1 holds every server binary postgres.sh runs, of a
# major in PG_MIN..PG_MAX, and sets PG_ACCEPTED_MAJOR. A directory refused for its major
# is added to PG_REFUSED ("13 at /usr/lib/postgresql/13/bin"), for messages.
pg_accept() {
	local dir=$1 major tool
	major="$(pg_major "$dir")" || return 1
	for tool in pg_ctl postgres pg_isready; do
		[[ -x "$dir/$tool" ]] || return 1
	done
	if ((major < PG_MIN || major > PG_MAX)); then
		[[ ", $PG_REFUSED, " == *", $major at $dir, "* ]] || PG_REFUSED+="${PG_REFUSED:+, }$major at $dir"
		return 1
	fi
	PG_ACCEPTED_MAJOR=$major
}

# pg_find sets PG_FOUND_BIN and PG_FOUND_MAJOR to the PostgreSQL server to use, or fails
# with PG_REFUSED naming the servers of a major out of range. The order: PG_BIN when set
# (and nothing else then: it is an explicit choice), then `pg_config --bindir`, then the
# newest major in range among the usual places (Debian/Ubuntu, the PGDG RPMs, Homebrew on
# Apple silicon and on Intel) and the directory of an initdb on PATH (Fedora, Arch).
pg_find() {
	local dir best= best_major=0 root=${SETUP_FS_ROOT:-}
	PG_FOUND_BIN= PG_FOUND_MAJOR= PG_REFUSED= PG_ACCEPTED_MAJOR=
	if [[ -n "${PG_BIN:-}" ]]; then
		if ! pg_accept "$PG_BIN"; then
			PG_REFUSED="${PG_REFUSED:-no server binaries at $PG_BIN} (PG_BIN)"
			return 1
		fi
		PG_FOUND_BIN=$PG_BIN PG_FOUND_MAJOR=$PG_ACCEPTED_MAJOR
		return
	fi
	if dir="$(pg_config --bindir 2>/dev/null)" && pg_accept "$dir"; then
		PG_FOUND_BIN=$dir PG_FOUND_MAJOR=$PG_ACCEPTED_MAJOR
		return
	fi
	local candidates=("$root"/usr/lib/postgresql/*/bin "$root"/usr/pgsql-*/bin
		"$root"/opt/homebrew/opt/postgresql@*/bin "$root"/usr/local/opt/postgresql@*/bin)
	if dir="$(command -v initdb 2>/dev/null)"; then candidates+=("${dir%/*}"); fi
	for dir in "${candidates[@]}"; do
		pg_accept "$dir" || continue
		if ((PG_ACCEPTED_MAJOR > best_major)); then best=$dir best_major=$PG_ACCEPTED_MAJOR; fi
	done
	[[ -n "$best" ]] || return 1
	PG_FOUND_BIN=$best PG_FOUND_MAJOR=$best_major
}
