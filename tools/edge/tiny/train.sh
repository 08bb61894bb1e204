#!/usr/bin/env bash
# train.sh — (re)trains the tiny decoder (tools/edge/tiny/train.py) in the
# pinned venv (tools/edge/edgevenv.sh) and rewrites tests/data/edge/tiny_model.
# safetensors and tiny_expected.json. Not run by CI (a few CPU minutes).
exec "$(dirname "$0")/../edgevenv.sh" tools/edge/tiny/train.py
