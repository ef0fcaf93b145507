#!/usr/bin/env bash
# render-mermaid.sh: renders docs/sequence.md's diagram to docs/sequence.svg, committed
# beside it so the diagram shows on viewers that do not draw Mermaid.
#
# Needs a Chromium (Debian: apt-get install chromium); CHROMIUM overrides its path. Run it
# after changing the diagram; CI does not render, it only parses (scripts/check-mermaid.sh).
# mermaid-cli is installed into a temporary directory, with Puppeteer's own browser
# download skipped: the system Chromium is used instead.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHROMIUM="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
MERMAID_CLI_VERSION=11.17.0   # the last release that runs on Node 20
PUPPETEER_VERSION=24.43.1

if [[ -z "$CHROMIUM" ]]; then
	echo "render-mermaid: no Chromium found; install it (apt-get install chromium) or set CHROMIUM" >&2
	exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
PUPPETEER_SKIP_DOWNLOAD=1 npm install --prefix "$work" --no-audit --no-fund --loglevel=error \
	"@mermaid-js/mermaid-cli@$MERMAID_CLI_VERSION" "puppeteer@$PUPPETEER_VERSION" >&2

# Chromium's sandbox needs user namespaces, which containers and CI machines often lack.
cat >"$work/puppeteer.json" <<JSON
{"executablePath": "$CHROMIUM", "args": ["--no-sandbox", "--disable-gpu"]}
JSON

# With a .md input, mmdc renders each mermaid block to <output>-<n>.svg.
"$work/node_modules/.bin/mmdc" --puppeteerConfigFile "$work/puppeteer.json" \
	--input "$ROOT/docs/sequence.md" --output "$work/sequence.svg" --backgroundColor white >&2
rendered=("$work"/sequence*.svg)
if (( ${#rendered[@]} != 1 )); then
	echo "render-mermaid: expected one diagram, got ${#rendered[@]}" >&2
	exit 1
fi
cp "${rendered[0]}" "$ROOT/docs/sequence.svg"
echo "render-mermaid: wrote docs/sequence.svg"
