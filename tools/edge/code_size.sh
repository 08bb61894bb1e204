#!/usr/bin/env bash
# code_size.sh — the flash an application pays for the micro library's
# attention, per target: the linked size, not the object size. Each path is
# a minimal program that calls one entry point (af_sdpa_f32_ex or
# af_sdpa_s8_ex, every option compiled in: masks, ALiBi, windows, padding)
# with arguments the compiler cannot see, built the way ESP-IDF and the
# Cortex-M SDKs build (-ffunction-sections -fdata-sections,
# -Wl,--gc-sections); its size minus that of the same program without the
# call is what the attention costs: its code, its tables and whatever it
# pulls from the C library (expf for f32). The int8 softcap (its tanh table
# and loop) is linked only by af_sdpa_s8_softcap_ex (last column). The probe, the KV cache and
# decode, and the f32 <-> int8 preparation (af_s8_prepare, float; done once
# at setup or offline) are not linked unless called. Also the int8 decode
# step (af_decode_s8 + af_kv_cache_s8_append) as a second figure.
#
#   tools/edge/code_size.sh [BUILD]   prints a markdown table (bytes)
#   AF_EDGE_CFLAGS=-DAF_S8_NO_D64 tools/edge/code_size.sh   the library built
#                                     with extra flags (the same for bench.sh)
# Invariant: the same -O2 flags and picolibc as every other edge build.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-${ATTNFLOW_BUILD_DIR:-$ROOT/build}}
OUT=$BUILD/edge/code_size
source "$ROOT/tools/edge/targets.sh"
mkdir -p "$OUT"
INC="-I$ROOT/include -I$ROOT/micro/src"
mapfile -t SRCS < <(micro_sources "$ROOT")

# One program, four variants chosen by -DCALL=0..3; the pointers come from
# volatile globals so that nothing is constant-folded away.
cat > "$OUT/app.c" <<'C'
#include "attnflow/micro.h"
void* volatile g_ptr[16];
int main(void) {
  int r = 0;
#if CALL == 1
  r = (int)af_sdpa_f32_ex(g_ptr[0], g_ptr[1], g_ptr[2], g_ptr[3], g_ptr[4], g_ptr[5], 0.125f,
                          g_ptr[6], g_ptr[7], g_ptr[8], 256);
#elif CALL == 2
  r = (int)af_sdpa_s8_ex(g_ptr[0], g_ptr[2], g_ptr[3], g_ptr[4], g_ptr[5], g_ptr[9], g_ptr[6],
                         g_ptr[7], g_ptr[8], 256);
#elif CALL == 3
  r = (int)af_kv_cache_s8_append(g_ptr[10], g_ptr[2], g_ptr[3]);
  r += (int)af_decode_s8(g_ptr[0], g_ptr[2], g_ptr[10], 4, g_ptr[9], g_ptr[11], g_ptr[8], 256);
#elif CALL == 4
  r = (int)af_sdpa_s8_softcap_ex(g_ptr[0], g_ptr[2], g_ptr[3], g_ptr[4], g_ptr[5], g_ptr[9],
                                 g_ptr[6], g_ptr[7], g_ptr[8], 256);
#endif
  return r;
}
C
size_of() {  # target elf -> text + rodata bytes (code and constants: flash)
  "$(edge_prefix "$1")size" -A "$2" |
    awk '$1 ~ /^\.(text|rodata|srodata)/ {s += $2} END {print s + 0}'
}
echo "| target | f32 attention B | int8 attention B | int8 decode step B | int8 attention with softcap B |"
echo "|---|---:|---:|---:|---:|"
for t in "${EDGE_TARGETS[@]}"; do
  cc=$(edge_cc "$t")
  row="| $t"
  for call in 0 1 2 3 4; do
    $cc $(edge_cflags "$t") -O2 -std=c99 -ffunction-sections -fdata-sections ${AF_EDGE_CFLAGS:-} $INC \
      $(edge_ldflags "$t") -Wl,--gc-sections -DCALL=$call -o "$OUT/${t}_$call.elf" \
      "$OUT/app.c" "${SRCS[@]}" -lm
    sz=$(size_of "$t" "$OUT/${t}_$call.elf")
    if ((call == 0)); then base=$sz; else row+=" | $((sz - base))"; fi
  done
  echo "$row |"
done
