#!/usr/bin/env bash
# train.sh — (re)trains the tiny decoder (tools/edge/tiny/train.py) in a
# pinned venv under .cache/edgevenv and rewrites tests/data/edge/tiny_model.
# safetensors and tiny_expected.json. Not run by CI (a few CPU minutes).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
VENV=$ROOT/.cache/edgevenv
[[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --no-deps -r "$ROOT/tools/edge/tiny/requirements.txt"
"$VENV/bin/python" "$ROOT/tools/edge/tiny/train.py"
