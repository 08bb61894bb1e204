#!/usr/bin/env bash
# train.sh — (re)trains the tiny Llama-style decoder (tools/edge/tiny_llama/
# train.py) in the pinned venv (tools/edge/edgevenv.sh, shared with the first
# tiny model), rewrites tests/data/edge/tiny_llama.safetensors and
# tiny_llama_expected.json, then runs the NumPy integer model (int8_model.py)
# that writes tiny_llama_s8.*. Not run by CI (a few CPU minutes).
exec "$(dirname "$0")/../edgevenv.sh" tools/edge/tiny_llama/train.py tools/edge/tiny_llama/int8_model.py
