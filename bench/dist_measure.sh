#!/usr/bin/env bash
# bench/dist_measure.sh — loopback measurements behind docs/distributed.md and
# bench/dist_model.py. Appends one JSON line per run (from `attnflow ring bench
# --json`) to bench/results/dist_measured.jsonl (the file is rewritten).
#
#   bench/dist_measure.sh [BUILD_DIR]     (default build/)
#
# This machine has 2 cores: P=4 runs 4 single-threaded ranks on 2 cores
# (OVERSUBSCRIBED); every rank uses 1 kernel thread. Runs at normal priority.
# Wall time: about 10 minutes on 2 shared cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CLI=$BUILD/attnflow
OUT=bench/results/dist_measured.jsonl
MPIRUN=(mpirun --oversubscribe --bind-to none --mca btl self,vader,tcp)
[[ $(id -u) == 0 ]] && MPIRUN+=(--allow-run-as-root)
: > "$OUT"
run() {  # P, then ring bench args
  local p=$1; shift
  echo "== P=$p $*" >&2
  "${MPIRUN[@]}" -np "$p" "$CLI" ring bench "$@" --json > "$OUT.tmp"
  cat "$OUT.tmp" >&2
  grep '^{' "$OUT.tmp" >> "$OUT"
  rm -f "$OUT.tmp"
}
SHAPE=(--heads 8 --kv-heads 2 --head-dim 64)
# 1. Compute per block and strong scaling (causal prefill, L=8192).
for p in 1 2 4; do run "$p" prefill --q-len 8192 "${SHAPE[@]}" --causal top_left --iters 5; done
run 4 prefill --q-len 8192 "${SHAPE[@]}" --causal top_left --iters 5 --layout contiguous
run 2 prefill --q-len 8192 "${SHAPE[@]}" --causal none --iters 5
# 2. Transfer cost per byte (no compute): small and large blocks.
for L in 512 8192 131072; do run 2 prefill --q-len "$L" "${SHAPE[@]}" --iters 10 --skip-compute; done
# 3. Sharded decode, 262144-token cache.
for p in 1 2 4; do run "$p" decode --q-len 1 --kv-len 262144 "${SHAPE[@]}" --kv-dtype F16 --causal bottom_right --iters 20; done
# 4. Peak RSS per rank at L=262144 (memory only: --skip-compute; F16 K/V).
for p in 1 4; do run "$p" prefill --q-len 262144 "${SHAPE[@]}" --kv-dtype F16 --iters 1 --skip-compute; done
echo "wrote $OUT" >&2
