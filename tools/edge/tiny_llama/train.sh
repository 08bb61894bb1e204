#!/usr/bin/env bash
# train.sh — (re)trains the tiny Llama-style decoder (tools/edge/tiny_llama/
# train.py) in the pinned venv .cache/edgevenv (tools/edge/tiny/
# requirements.txt, shared with the first tiny model), rewrites
# tests/data/edge/tiny_llama.safetensors and tiny_llama_expected.json, then
# runs the NumPy integer model (int8_model.py) that writes tiny_llama_s8.*.
# Not run by CI (a few CPU minutes).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
VENV=$ROOT/.cache/edgevenv
[[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --no-deps -r "$ROOT/tools/edge/tiny/requirements.txt"
"$VENV/bin/python" "$ROOT/tools/edge/tiny_llama/train.py"
"$VENV/bin/python" "$ROOT/tools/edge/tiny_llama/int8_model.py"
