# npm-tools.sh, sourced by the check scripts: installs the npm packages of tools/ from its
# lockfile (npm ci) unless the installed tree already matches that lockfile.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/tools"

ensure_npm_tools() {
	local installed="$TOOLS/node_modules/.package-lock.json"
	# npm writes node_modules/.package-lock.json on every install; when it is newer than the
	# lockfile, the tree was installed from this lockfile or a later edit of it.
	if [[ -f "$installed" && "$installed" -nt "$TOOLS/package-lock.json" ]]; then
		return
	fi
	echo "npm ci in tools/" >&2
	npm ci --prefix "$TOOLS" --no-audit --no-fund --loglevel=error >&2
}
