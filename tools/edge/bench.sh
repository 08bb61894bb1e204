#!/usr/bin/env bash
# bench.sh — the numbers of docs/edge.md: per target (rv32imc, Cortex-M4F,
# Cortex-M33) and path (f32, int8): code size (text/rodata of the attention
# objects, from `size -A`), arena bytes (af_*_workspace_bytes, on the host),
# retired instructions per call and per MAC for L=128, D=64, 4 heads, causal
# (micro/bench/bench_main.c under QEMU -icount shift=0: rv32 minstret, Cortex-M
# SysTick calibrated by a loop of known length), estimated time at the part's
# clock with CPI = 1 (ESP32-C3 160 MHz; the Cortex-M parts 168 MHz), and the
# naive three-pass C baseline with a full score row, compiled the same way.
# Writes a markdown table to stdout and BUILD/edge/bench.md. Not run in CI.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-${ATTNFLOW_BUILD_DIR:-$ROOT/build}}
OUT=$BUILD/edge/bench
source "$ROOT/tools/edge/targets.sh"
mkdir -p "$OUT"
INC="-I$ROOT/include -I$ROOT/micro/src"
mapfile -t SRCS < <(micro_sources "$ROOT")

mhz() { case $1 in rv32imc) echo 160 ;; *) echo 168 ;; esac; }
{
echo "| target | path | instr/call | instr/MAC | est. ms @ clock (CPI=1) | naive instr/MAC | kit/naive instr | arena B (naive row B) | text B | rodata B |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for t in "${EDGE_TARGETS[@]}"; do
  cc=$(edge_cc "$t")
  $cc $(edge_cflags "$t") -O2 -std=c99 $INC $(edge_ldflags "$t") -o "$OUT/$t.elf" \
    "$ROOT/micro/bench/bench_main.c" "${SRCS[@]}" -lm
  for f in af_sdpa_f32 af_sdpa_s8; do
    $cc $(edge_cflags "$t") -O2 --specs=picolibc.specs -std=c99 $INC -c "$ROOT/micro/src/$f.c" -o "$OUT/${t}_$f.o"
  done
  edge_qemu "$t" "$OUT/$t.elf" > "$OUT/$t.txt" 2>&1
  for path in f32 s8; do
    read -r instr macs arena < <(awk -v n="kit_$path" '$1=="BENCH" && $2==n {print $4, $6, $10}' "$OUT/$t.txt")
    read -r ninstr narena < <(awk -v n="naive_$path" '$1=="BENCH" && $2==n {print $4, $10}' "$OUT/$t.txt")
    obj="$OUT/${t}_af_sdpa_$path.o"
    text=$("$(edge_prefix "$t")size" -A "$obj" | awk '$1 ~ /^\.text/ {s += $2} END {print s + 0}')
    rodata=$("$(edge_prefix "$t")size" -A "$obj" | awk '$1 ~ /^\.rodata/ || $1 ~ /^\.srodata/ {s += $2} END {print s + 0}')
    awk -v t="$t" -v p="$path" -v i="$instr" -v m="$macs" -v ni="$ninstr" -v a="$arena" \
        -v na="$narena" -v tx="$text" -v ro="$rodata" -v mhz="$(mhz "$t")" 'BEGIN {
      printf "| %s | %s | %d | %.2f | %.1f @ %d MHz | %.2f | %.2f | %d (%d) | %d | %d |\n",
        t, (p == "s8" ? "int8" : "f32"), i, i / m, i / (mhz * 1000.0), mhz, ni / m, i / ni, a, na, tx, ro }'
  done
done
echo
echo "Option paths on the same problem (instr/MAC over the useful MACs: a window of 64 keys has fewer):"
echo
echo "| target | path | plain | all-true bool mask [L,L] | ALiBi | window_left 63 |"
echo "|---|---|---:|---:|---:|---:|"
for t in "${EDGE_TARGETS[@]}"; do
  for path in f32 s8; do
    awk -v t="$t" -v p="$path" '$1=="BENCH" {ipm[$2] = $4 / $6}
      END { k = "kit_" p; printf "| %s | %s | %.2f | %.2f | %.2f | %.2f |\n", t, (p == "s8" ? "int8" : "f32"),
            ipm[k], ipm[k "_mask"], ipm[k "_alibi"], ipm[k "_win"] }' "$OUT/$t.txt"
  done
done
echo
echo "MACs per call: 2 x D x H x L(L+1)/2 = $(awk '$1=="BENCH"{print $6; exit}' "$OUT/rv32imc.txt") (causal top_left, B=1, H=Hkv=4, L=128, D=Dv=64)."
echo
# Arena bytes over the grid (host; the same functions run on the device).
cat > "$OUT/arena.c" <<'C'
#include <stdio.h>
#include "attnflow/micro.h"
int main(void) {
  int L[3] = {64, 128, 256}, D[2] = {32, 64}, i, j;
  printf("| L | head_dim | f32 arena B | int8 arena B | naive f32: score row B | naive int8: row + acc B |\n|---:|---:|---:|---:|---:|---:|\n");
  for (i = 0; i < 3; ++i)
    for (j = 0; j < 2; ++j) {
      af_sdpa_shape s = {1, 4, 4, L[i], L[i], D[j], D[j], AF_CAUSAL_TOP_LEFT};
      printf("| %d | %d | %u | %u | %u | %u |\n", L[i], D[j], (unsigned)af_sdpa_f32_workspace_bytes(&s),
             (unsigned)af_sdpa_s8_workspace_bytes(&s), (unsigned)(L[i] * 4),
             (unsigned)(L[i] * 4 + D[j] * 4));
    }
  return 0;
}
C
gcc -O2 -std=c99 $INC -o "$OUT/arena" "$OUT/arena.c" "${SRCS[@]}" -lm
"$OUT/arena"
} | tee "$OUT/../bench.md"
