#!/usr/bin/env bash
# check-k6.sh: checks the k6 scripts without running k6 (k6 is not installed here).
#   1. syntax, as an ES module: node --check on stdin (plain `node --check file.js` misses
#      syntax errors in ESM .js files on Node 20);
#   2. use of the k6 API, with TypeScript's checker against @types/k6
#      (loadtest/k6/jsconfig.json): misspelt functions, wrong option names or executors.
# Exits non-zero on the first failing check.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/npm-tools.sh"
ensure_npm_tools

shopt -s nullglob
scripts=("$ROOT"/loadtest/k6/*.js)
if (( ${#scripts[@]} == 0 )); then
	echo "check-k6: no scripts in loadtest/k6" >&2
	exit 1
fi
for script in "${scripts[@]}"; do
	node --input-type=module --check < "$script" || { echo "check-k6: syntax error in ${script#"$ROOT"/}" >&2; exit 1; }
done
"$TOOLS/node_modules/.bin/tsc" -p "$ROOT/loadtest/k6/jsconfig.json"
echo "check-k6: ${#scripts[@]} script(s) ok"
