#!/usr/bin/env bash
# check-mermaid.sh: parses the Mermaid diagrams of the docs with Mermaid's own parser
# (tools/check-mermaid.js). Nothing is rendered, so no browser is needed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/npm-tools.sh"
ensure_npm_tools
node "$TOOLS/check-mermaid.js" "$ROOT/docs/sequence.md"
