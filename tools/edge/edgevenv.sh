#!/usr/bin/env bash
# edgevenv.sh — runs Python scripts of tools/edge in the pinned venv
# .cache/edgevenv (tools/edge/tiny/requirements.txt, installed with --no-deps:
# the list is complete). Usage: edgevenv.sh SCRIPT... (paths relative to the
# repository root), each run in turn; stops at the first failure.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=$ROOT/.cache/edgevenv
[[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --no-deps -r "$ROOT/tools/edge/tiny/requirements.txt"
for script in "$@"; do
  "$VENV/bin/python" "$ROOT/$script"
done
