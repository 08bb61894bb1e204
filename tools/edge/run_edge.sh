#!/usr/bin/env bash
# run_edge.sh — CI check of the edge port kit (docs/edge.md):
#  1. exports EVERY golden sdpa and mha case (`attnflow export-c`; any refusal
#     fails: every committed case is within the device limits), except the
#     few listed in NOT_ON_DEVICE, whose semantics the micro library does not
#     implement yet (each must be refused naming that feature), plus a
#     generated decode case with a 1000-token cache (B2 H4 Lk1000 D128, ALiBi,
#     a window; its data read over semihosting at run time);
#  2. builds the on-device harness (micro/harness/golden_main.c) for rv32imc
#     (soft-float f32 + int8), Cortex-M4F (mps2-an386) and Cortex-M33
#     (mps2-an505), runs each under QEMU with semihosting: every case, f32 and
#     int8, every stage it carries; any mismatch fails; the int8 outputs must
#     be bit-identical on the host and every target;
#  3. plants bugs and requires the harness to name their stage ON THE DEVICE
#     (rv32imc): a tampered output -> 'out', a wrong scale -> 'scaled', an
#     inverted bool mask -> 'masked' (f32 and int8);
#  4. the tiny decoders: f32 tokens against PyTorch's, int8 logits against
#     the NumPy integer model (host, rv32imc, M4F);
#  5. the ESP-IDF component through an ESP-IDF-shaped CMake project
#     (micro/esp-idf/golden_app, mock IDF at tools/edge/idf_mock) for rv32imc:
#     configure, build, run under QEMU; a caller of every micro.h entry point
#     links against the component's library with the allocator wrapped away;
#  6. stage dumps: the harness built with -DAF_HARNESS_DUMP prints AFDUMP lines
#     on the device; `attnflow verify --compare LOG CASE` checks them;
#  7. static checks on the micro objects: no heap/stdio/abort symbols, no
#     soft-float call or float instruction in the rv32imc int8 objects (and
#     the checks find them in the f32 object, so they can fail).
# Sources come from THE list micro/sources.txt (micro_sources in targets.sh).
# Usage: tools/edge/run_edge.sh [BUILD_DIR]  (default build/, needs
# BUILD_DIR/attnflow). Exit non-zero on any failure.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-${ATTNFLOW_BUILD_DIR:-$ROOT/build}}" && pwd)
OUT=$BUILD/edge
CLI=$BUILD/attnflow
source "$ROOT/tools/edge/targets.sh"
log() { printf '[edge] %s\n' "$*" >&2; }
fail() { printf '[edge] FAIL: %s\n' "$*" >&2; exit 1; }
t0=$(date +%s)
rm -rf "$OUT" && mkdir -p "$OUT/cases" "$OUT/gen"
mapfile -t SRCS < <(micro_sources "$ROOT")
((${#SRCS[@]} > 0)) || fail "micro/sources.txt lists no source"

# 1. Export every case. cases.h lists them and sizes the pool to the largest
# chunk export-c computed (the harness checks its own use against it).
export_case() {  # FILE NAME [export-c options...]
  local f=$1 name=$2 msg
  shift 2
  msg=$("$CLI" export-c "$f" --out "$OUT/cases/$name.h" "$@" 2>&1) ||
    fail "export-c $(basename "$f"): $msg"
  pool=$(sed -n 's/.*pool_bytes=\([0-9]*\).*/\1/p' <<<"$msg")
  ((pool > max_pool)) && max_pool=$pool
  pools[$name]=$pool
  names+=("$name")
}
names=()
declare -A pools
max_pool=0
# The committed cases whose semantics the micro library does not implement
# yet, with the feature export-c names when it refuses them: each must be
# refused for exactly that reason (and write nothing); every other case must
# export.
declare -A NOT_ON_DEVICE=(
  [sdpa_alibi_per_batch_window]="[B,H] ALiBi slopes"
  [sdpa_kvlens_per_sequence_causal_br]="the per-sequence diagonal (kv_align per_sequence)"
  [sdpa_kvlens_per_sequence_window_alibi_softcap]="softcap"
  [sdpa_softcap5_gqa_causal_br]="softcap"
  [sdpa_softcap_floatmask_alibi]="softcap"
)
refuse_case() {  # FILE NAME REASON
  local f=$1 name=$2 why="$3 is not implemented by the micro library yet" msg
  if msg=$("$CLI" export-c "$f" --out "$OUT/cases/$name.h" 2>&1); then
    fail "export-c $(basename "$f") exported a case with $3 (NOT_ON_DEVICE lists it)"
  fi
  [[ $msg == *"$why"* ]] || fail "export-c $(basename "$f"): expected '$why', got: $msg"
  [[ ! -e $OUT/cases/$name.h ]] || fail "export-c $(basename "$f") wrote $name.h while refusing"
  log "$name: not on the device yet: $3"
  n_refused=$((n_refused + 1))
}
n_refused=0
for f in "$ROOT"/tests/data/golden/sdpa_*.safetensors "$ROOT"/tests/data/golden/mha_*.safetensors; do
  name=$(basename "$f" .safetensors)
  if [[ -v NOT_ON_DEVICE[$name] ]]; then
    refuse_case "$f" "$name" "${NOT_ON_DEVICE[$name]}"
  else
    export_case "$f" "$name"
  fi
done
((n_refused == ${#NOT_ON_DEVICE[@]})) ||
  fail "NOT_ON_DEVICE lists ${#NOT_ON_DEVICE[@]} cases, $n_refused of them are committed"
n_committed=${#names[@]}
((n_committed >= 47)) || fail "only $n_committed golden cases exported"
# A decode step over a 1000-token cache: 8 MB of f32 K/V, far beyond a flash
# map, so its data stays in a file the harness reads over semihosting, one
# batch element and kv head (1 MB of K/V) at a time.
"$CLI" golden --kind sdpa --batch 2 --heads 4 --kv-heads 4 --q-len 1 --kv-len 1000 \
  --head-dim 128 --causal bottom_right --kv-lens 1000 613 --window-left 700 --alibi --seed 30 \
  --out "$OUT/gen/decode_b2h4_lk1000_d128.safetensors" > /dev/null ||
  fail "attnflow golden could not write the decode case"
export_case "$OUT/gen/decode_b2h4_lk1000_d128.safetensors" decode_b2h4_lk1000_d128 \
  --data "$OUT/cases/decode_b2h4_lk1000_d128.bin" --ram-bytes 1536KiB
# head_dim 64 (a multiple of 4 with a 4-wide tail) runs the Cortex-M
# assembly's unrolled paths end to end: GQA with causal, and batch 2 with a
# boolean mask, ALiBi and padding.
"$CLI" golden --kind sdpa --batch 1 --heads 2 --kv-heads 1 --q-len 67 --kv-len 67 \
  --head-dim 64 --causal top_left --seed 31 --out "$OUT/gen/sdpa_d64_causal.safetensors" \
  > /dev/null || fail "attnflow golden could not write the d64 causal case"
export_case "$OUT/gen/sdpa_d64_causal.safetensors" sdpa_d64_causal
"$CLI" golden --kind sdpa --batch 2 --heads 2 --q-len 29 --kv-len 53 --head-dim 64 \
  --causal bottom_right --mask bool --alibi --kv-lens 53 40 --seed 32 \
  --out "$OUT/gen/sdpa_d64_mask_alibi.safetensors" > /dev/null ||
  fail "attnflow golden could not write the d64 masked case"
export_case "$OUT/gen/sdpa_d64_mask_alibi.safetensors" sdpa_d64_mask_alibi
write_cases_h() {  # FILE POOL NAME...
  local file=$1 pool=$2 nm
  shift 2
  {
    echo "/* cases.h — generated by tools/edge/run_edge.sh */"
    echo "#define AF_HARNESS_POOL_BYTES $(((pool + 1023) / 1024 * 1024))"
    for nm in "$@"; do echo "#include \"$nm.h\""; done
    echo "static const af_golden_case* const kCases[] = {"
    for nm in "$@"; do echo "  &$nm,"; done
    echo "};"
    echo "static const int kNumCases = (int)(sizeof kCases / sizeof kCases[0]);"
  } > "$file"
}
write_cases_h "$OUT/cases/cases.h" "$max_pool" "${names[@]}"
n_mha=$(printf '%s\n' "${names[@]}" | grep -c '^mha_')
n_sdpa=$((${#names[@]} - n_mha))
log "exported $n_sdpa sdpa cases and $n_mha mha cases (harness pool $max_pool bytes)"

WARN="--specs=picolibc.specs -std=c99 -Wall -Wextra -Wpedantic -Werror -ffreestanding -fno-fast-math"
INC="-I$ROOT/include -I$ROOT/micro/src -I$ROOT/micro/harness -I$OUT/cases"

# 2. Build and run the harness on every target (builds in parallel, 2 jobs).
build_lib() {  # target dir [extra cflags...]
  local t=$1 dir=$2 cc s
  shift 2
  cc=$(edge_cc "$t")
  mkdir -p "$dir"
  for s in "${SRCS[@]}"; do
    $cc $(edge_cflags "$t") -O2 $WARN $INC "$@" -c "$s" -o "$dir/$(basename "$s" .c).o"
  done
}
build_harness() {  # target dir cases_dir elf [extra harness cflags...]
  local t=$1 dir=$2 cases=$3 elf=$4 cc
  shift 4
  cc=$(edge_cc "$t")
  $cc $(edge_cflags "$t") -O2 --specs=picolibc.specs -std=c99 -Wall -Wextra -Werror \
    -I"$ROOT/include" -I"$ROOT/micro/harness" -I"$cases" "$@" \
    -c "$ROOT/micro/harness/golden_main.c" -o "$elf.o"
  $cc $(edge_cflags "$t") -O2 $(edge_ldflags "$t") -o "$elf" "$elf.o" "$dir"/af_*.o -lm
}
build_target() {
  build_lib "$1" "$OUT/$1" && build_harness "$1" "$OUT/$1" "$OUT/cases" "$OUT/$1/golden.elf"
}
pids=()
for t in "${EDGE_TARGETS[@]}"; do
  build_target "$t" > "$OUT/build_$t.log" 2>&1 &
  pids+=($!)
  if ((${#pids[@]} >= 2)); then wait "${pids[0]}" || fail "build: $(cat "$OUT"/build_*.log)"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p" || fail "build: $(cat "$OUT"/build_*.log)"; done
summary="SUMMARY: $n_sdpa sdpa cases ($n_sdpa int8), $n_mha mha cases ($n_mha int8), 0 mismatching"
for t in "${EDGE_TARGETS[@]}"; do
  set +e
  (cd "$OUT/cases" && edge_qemu "$t" "$OUT/$t/golden.elf") > "$OUT/golden_$t.txt" 2>&1
  rc=$?
  set -e
  grep -q "$summary" "$OUT/golden_$t.txt" && ((rc == 0)) || {
    grep -B14 "FIRST MISMATCH" "$OUT/golden_$t.txt" | head -60 >&2 || tail -20 "$OUT/golden_$t.txt" >&2
    grep -E "pool|cannot" "$OUT/golden_$t.txt" | head >&2 || true
    fail "golden harness on $t (exit $rc), full log $OUT/golden_$t.txt"
  }
  log "$t: $(grep SUMMARY "$OUT/golden_$t.txt")"
done

# 2b. The int8 path is integer-only: its outputs must be bit-identical on
# every target and on the host (x86-64 build of the same harness).
gcc -O2 -std=c99 -Wall -Wextra -Werror $INC -o "$OUT/host_golden" "$ROOT/micro/harness/golden_main.c" "${SRCS[@]}" -lm
(cd "$OUT/cases" && "$OUT/host_golden") > "$OUT/golden_host.txt" ||
  fail "golden harness on the host: $(grep -m1 'FIRST MISMATCH' "$OUT/golden_host.txt")"
grep 'int8 checksum' "$OUT/golden_host.txt" > "$OUT/checksums_host.txt"
[[ $(wc -l < "$OUT/checksums_host.txt") -eq $((n_sdpa + n_mha)) ]] || fail "host harness printed $(wc -l < "$OUT/checksums_host.txt") int8 checksums for $n_sdpa sdpa and $n_mha mha cases"
for t in "${EDGE_TARGETS[@]}"; do
  grep 'int8 checksum' "$OUT/golden_$t.txt" | diff -q - "$OUT/checksums_host.txt" > /dev/null ||
    fail "int8 outputs on $t differ from the host: $(grep 'int8 checksum' "$OUT/golden_$t.txt" | diff - "$OUT/checksums_host.txt" | head -4)"
done
# The column value layout (AF_V_COLS: the DSP SMLAD kernels on the Cortex-M,
# the C loops on rv32imc) must give the same bits.
for t in rv32imc m4f; do
  build_harness "$t" "$OUT/$t" "$OUT/cases" "$OUT/$t/golden_cols.elf" -DAF_HARNESS_V_COLS
  set +e
  (cd "$OUT/cases" && edge_qemu "$t" "$OUT/$t/golden_cols.elf") > "$OUT/golden_cols_$t.txt" 2>&1
  rc=$?
  set -e
  grep -q "$summary" "$OUT/golden_cols_$t.txt" && ((rc == 0)) ||
    fail "golden harness with AF_V_COLS on $t (exit $rc), log $OUT/golden_cols_$t.txt"
  grep 'int8 checksum' "$OUT/golden_cols_$t.txt" | diff -q - "$OUT/checksums_host.txt" > /dev/null ||
    fail "int8 outputs with AF_V_COLS on $t differ from the row layout's"
done
# The off-switches give the same bits: -DAF_S8_NO_D64 (no head_dim 64 copy)
# on the host, -DAF_S8_NO_ASM (the SMLAD intrinsics instead of the Thumb-2
# assembly) on the M4F.
gcc -O2 -std=c99 -Wall -Wextra -Werror -DAF_S8_NO_D64 $INC -o "$OUT/host_golden_nod64" \
  "$ROOT/micro/harness/golden_main.c" "${SRCS[@]}" -lm
(cd "$OUT/cases" && "$OUT/host_golden_nod64") | grep 'int8 checksum' |
  diff -q - "$OUT/checksums_host.txt" > /dev/null ||
  fail "int8 outputs with -DAF_S8_NO_D64 differ from the default build's"
build_lib m4f "$OUT/m4f_noasm" -DAF_S8_NO_ASM
build_harness m4f "$OUT/m4f_noasm" "$OUT/cases" "$OUT/m4f_noasm/golden.elf"
set +e
(cd "$OUT/cases" && edge_qemu m4f "$OUT/m4f_noasm/golden.elf") > "$OUT/golden_m4f_noasm.txt" 2>&1
rc=$?
set -e
grep -q "$summary" "$OUT/golden_m4f_noasm.txt" && ((rc == 0)) ||
  fail "golden harness with -DAF_S8_NO_ASM on m4f (exit $rc), log $OUT/golden_m4f_noasm.txt"
grep 'int8 checksum' "$OUT/golden_m4f_noasm.txt" | diff -q - "$OUT/checksums_host.txt" > /dev/null ||
  fail "int8 outputs with -DAF_S8_NO_ASM on m4f differ from the assembly's"
log "int8 outputs bit-identical on host, ${EDGE_TARGETS[*]} ($n_sdpa sdpa + $n_mha mha cases), with AF_V_COLS on rv32imc and m4f, -DAF_S8_NO_D64 (host) and -DAF_S8_NO_ASM (m4f)"

# 3. Planted bugs, named at their stage by the harness on rv32imc. Two cases
# (a plain one and a bool-mask one) keep these builds small.
t=rv32imc
mkdir -p "$OUT/plant"
cp "$OUT/cases/sdpa_basic.h" "$OUT/cases/sdpa_boolmask_2d.h" "$OUT/cases/mha_self_e16_h4.h" "$OUT/plant/"
plant_pool=$(printf '%s\n' "${pools[sdpa_basic]}" "${pools[sdpa_boolmask_2d]}" "${pools[mha_self_e16_h4]}" | sort -n | tail -1)
write_cases_h "$OUT/plant/cases.h" "$plant_pool" sdpa_basic sdpa_boolmask_2d mha_self_e16_h4
expect_stage() {  # log case impl stage what
  local kind=sdpa
  [[ $2 == mha_* ]] && kind=mha
  awk -v c="case $2  kind=$kind  impl=$3" 'index($0, c) == 1 {on = 1; next} /^case / {on = 0} on' "$1" |
    grep -q "=> FIRST MISMATCH: stage '$4'" || fail "$5: the harness did not name stage '$4' for $2 ($3); log $1"
}
build_harness $t "$OUT/$t" "$OUT/plant" "$OUT/plant/tamper.elf" -DAF_HARNESS_TAMPER
set +e
edge_qemu $t "$OUT/plant/tamper.elf" > "$OUT/plant/tamper.txt" 2>&1
rc=$?
set -e
((rc != 0)) || fail "tampered harness exited 0"
expect_stage "$OUT/plant/tamper.txt" sdpa_basic micro-f32 out "a tampered output"
expect_stage "$OUT/plant/tamper.txt" sdpa_basic micro-s8 out "a tampered int8 output"
expect_stage "$OUT/plant/tamper.txt" mha_self_e16_h4 micro-f32 out "a tampered mha output"
expect_stage "$OUT/plant/tamper.txt" mha_self_e16_h4 micro-s8 out "a tampered int8 mha output"
grep -q "heads_out judged teacher-forced" "$OUT/plant/tamper.txt" ||
  fail "a q off by a rounding did not switch the int8 mha heads_out check to teacher-forced"
for bug in SCALE MASK; do
  build_lib $t "$OUT/plant/lib_$bug" -DAF_TEST_PLANT_${bug}_BUG
  build_harness $t "$OUT/plant/lib_$bug" "$OUT/plant" "$OUT/plant/$bug.elf"
  set +e
  edge_qemu $t "$OUT/plant/$bug.elf" > "$OUT/plant/$bug.txt" 2>&1
  rc=$?
  set -e
  ((rc != 0)) || fail "the harness exited 0 on a library with a planted $bug bug"
done
expect_stage "$OUT/plant/SCALE.txt" sdpa_basic micro-f32 scaled "a wrong scale"
expect_stage "$OUT/plant/MASK.txt" sdpa_boolmask_2d micro-f32 masked "an inverted bool mask (f32)"
expect_stage "$OUT/plant/MASK.txt" sdpa_boolmask_2d micro-s8 masked "an inverted bool mask (int8)"
log "planted bugs named on $t: tampered output -> 'out', wrong scale -> 'scaled', inverted mask -> 'masked' (f32 and int8)"

# Runs micro/tiny/NAME_main.c with its weights header (written by
# tools/edge/EXPORT.py into $OUT/cases/NAME_weights.h) on the host, then on
# rv32imc and M4F under QEMU ($OUT/$t/NAME.elf); fails ("WHAT on ...")
# unless each run exits 0 and prints EXPECT; logs the line matching SUMMARY
# and the instruction count. With OBJ, also compiles the program as an
# rv32imc picolibc object (the freestanding build of the ESP-IDF component).
tiny_case() {  # NAME EXPORT EXPECT WHAT SUMMARY [OBJ]
  local name=$1 export=$2 expect=$3 what=$4 summary=$5 obj=${6:-} t cc rc
  local main=$ROOT/micro/tiny/${name}_main.c
  python3 "$ROOT/tools/edge/$export.py" "$OUT/cases/${name}_weights.h"
  gcc -O2 -std=c99 -Wall -Wextra -Werror $INC -o "$OUT/host_$name" "$main" "${SRCS[@]}" -lm
  "$OUT/host_$name" > "$OUT/${name}_host.txt" 2>&1 && grep -q "$expect" "$OUT/${name}_host.txt" ||
    fail "$what on the host: $(cat "$OUT/${name}_host.txt")"
  log "host: $(grep "$summary" "$OUT/${name}_host.txt")"
  for t in rv32imc m4f; do
    cc=$(edge_cc $t)
    $cc $(edge_cflags $t) -O2 -std=c99 -Wall -Wextra -Werror $INC \
      $(edge_ldflags $t) -o "$OUT/$t/$name.elf" "$main" "$OUT/$t"/af_*.o -lm
    set +e
    edge_qemu $t "$OUT/$t/$name.elf" > "$OUT/${name}_$t.txt" 2>&1
    rc=$?
    set -e
    ((rc == 0)) && grep -q "$expect" "$OUT/${name}_$t.txt" ||
      fail "$what on $t (exit $rc): $(cat "$OUT/${name}_$t.txt")"
    log "$t: $(grep "$summary" "$OUT/${name}_$t.txt"); $(grep -o '[0-9]* instructions per generated token' "$OUT/${name}_$t.txt")"
  done
  if [[ -n $obj ]]; then
    riscv64-unknown-elf-gcc $(edge_cflags rv32imc) -O2 --specs=picolibc.specs -std=c99 $INC -c \
      "$main" -o "$OUT/rv32imc/${name}_main.o"
  fi
}

# 4. The tiny char-level decoder (docs/edge.md "tiny model"): weights in
# flash, greedy generation of 64 tokens in f32 on rv32imc (soft-float) and
# Cortex-M4F; every token must equal the committed PyTorch tokens.
tiny_case tiny tiny/export_header "TINY f32: 64/64 tokens identical to PyTorch" \
  "tiny decoder" 'tokens identical'

# 4b. The int8 tiny decoder: integer-only on the device; every step's int32
# logits must equal the NumPy model's (tools/edge/tiny/int8_model.py, committed
# in tests/data/edge/tiny_s8.safetensors) on the host, rv32imc and M4F.
tiny_case tiny_s8 tiny/export_s8_header \
  "TINY int8: 64/64 steps with logits bit-identical to the NumPy model, 64/64 tokens equal" \
  "int8 tiny decoder" 'TINY int8: 64' obj

# 4c. The tiny Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU): f32 tokens
# against PyTorch's; int8 (int8 weights and int8 KV cache, af_decode_s8)
# logits against its NumPy integer model, every step, bit for bit.
tiny_case tiny_llama tiny_llama/export_header "TINY LLAMA f32: 64/64 tokens identical to PyTorch" \
  "tiny Llama decoder" 'tokens identical'
tiny_case tiny_llama_s8 tiny_llama/export_s8_header \
  "TINY LLAMA int8: 64/64 steps with logits bit-identical to the NumPy model, 64/64 tokens equal" \
  "int8 tiny Llama decoder" 'TINY LLAMA int8: 64' obj

# 5. The ESP-IDF component, built as ESP-IDF builds it (its own CMakeLists.txt
# and source list) through the mock, linked into golden_app and run.
IDF=$OUT/idf
mkdir -p "$IDF/cases"
cp "$OUT/plant/"*.h "$IDF/cases/"
IDF_PATH="$ROOT/tools/edge/idf_mock" cmake -S "$ROOT/micro/esp-idf/golden_app" -B "$IDF/build" \
  -G Ninja -DAF_CASES_DIR="$IDF/cases" > "$IDF/configure.log" 2>&1 ||
  fail "ESP-IDF-shaped configure of golden_app: $(tail -20 "$IDF/configure.log")"
cmake --build "$IDF/build" > "$IDF/build.log" 2>&1 || fail "ESP-IDF-shaped build: $(tail -30 "$IDF/build.log")"
(cd "$IDF/cases" && edge_qemu rv32imc "$IDF/build/attnflow_golden.elf") > "$IDF/run.txt" 2>&1 ||
  fail "golden_app under QEMU: $(tail -20 "$IDF/run.txt")"
grep -q "attnflow golden_app: 0 failing case x path runs" "$IDF/run.txt" ||
  fail "golden_app did not pass: $(tail -20 "$IDF/run.txt")"
COMPONENT_LIB=$IDF/build/lib__idf_attnflow_micro.a
[[ -f $COMPONENT_LIB ]] || fail "the mock build made no component library"
log "ESP-IDF component: golden_app configured, built (rv32imc) and run under QEMU: $(grep SUMMARY "$IDF/run.txt")"

# 5b. Link proof: a caller of every micro.h entry point links against the
# component's library (so its source list is complete) and runs, with
# malloc/free/calloc/realloc wrapped to undefined symbols (no heap).
t=rv32imc
cc=$(edge_cc $t)
LINKT=$OUT/rv32imc/link_test
cat > "$LINKT.c" <<'C'
/* link_test.c — calls every entry point of include/attnflow/micro.h; linked
 * against the ESP-IDF component's library with malloc/free/calloc/realloc
 * wrapped to undefined symbols, so a missing source or any use of the heap
 * fails the link. */
#include "attnflow/micro.h"
static float fbuf[4096];
static int8_t ibuf[4096];
static int32_t i32buf[64];
static uint32_t arena[1024];
static void sink(void* ctx, const char* s, size_t n) { (void)ctx; (void)s; (void)n; }
int main(void) {
  af_sdpa_shape s = {1, 2, 1, 4, 4, 8, 8, AF_CAUSAL_TOP_LEFT};
  af_sdpa_opts o;
  af_s8_params p;
  af_kv_cache c;
  af_qmult qm[8];
  float one = 1.f, small = 1.f / 64, lse;
  int32_t wsum, k, dims[2] = {2, 4};
  int r;
  af_sdpa_opts_init(&o);
  r = af_sdpa_check_shape(&s) | af_sdpa_check_opts(&o, &s, 0);
  r |= af_sdpa_f32(fbuf, fbuf + 64, fbuf + 128, fbuf + 256, fbuf + 512, 0, 0.35f, &s, arena,
                   af_sdpa_f32_workspace_bytes(&s));
  r |= af_sdpa_f32_ex(fbuf, 0, fbuf + 128, fbuf + 256, fbuf + 512, 0, 0.35f, &s, &o, arena, 1024);
  r |= af_sdpa_f32_probe(fbuf + 600, fbuf + 610, fbuf + 620, fbuf + 630, &lse, fbuf + 128,
                         fbuf + 256, 0, 0.35f, &s, &o, 0, 1, 2);
  r |= af_s8_prepare(&p, &small, &small, &one, &one, 1, 0.35f);
  r |= af_s8_alibi_prepare(i32buf, fbuf, 2, &small, &small, 1, 0.35f);
  r |= af_s8_mask_prepare(i32buf + 8, fbuf, 4, small, small, 0.35f);
  r |= af_sdpa_s8(ibuf, ibuf + 64, ibuf + 128, ibuf + 256, 0, &p, &s, arena,
                  af_sdpa_s8_workspace_bytes(&s));
  r |= af_sdpa_s8_ex(ibuf, ibuf + 64, ibuf + 128, ibuf + 256, 0, &p, &s, 0, arena, 1024);
  r |= af_sdpa_s8_probe(i32buf, i32buf + 8, i32buf + 16, &wsum, ibuf + 64, ibuf + 128, 0, &p,
                        &s, 0, 0, 1, 2);
  r |= af_kv_cache_init(&c, fbuf + 1024, fbuf + 2048, 1, 8, 8, 16, 4);
  r |= af_kv_cache_append(&c, fbuf, fbuf);
  r |= af_decode_f32(fbuf + 3000, 0, fbuf, &c, 2, 0.35f, arena, af_decode_f32_workspace_bytes(&c, 2));
  r |= af_decode_f32_ex(fbuf + 3000, 0, fbuf, &c, 2, 0.35f, fbuf, arena, 1024);
  {
    af_mha_shape ms = {1, 2, 2, 8, 2, 1, AF_CAUSAL_BOTTOM_RIGHT};
    af_mha_weights_f32 mw = {fbuf, fbuf + 64, fbuf + 128, fbuf + 192, 0, 0, 0, 0};
    r |= af_mha_f32(fbuf + 3500, fbuf + 256, fbuf + 256, fbuf + 256, 0, &mw, 0.5f, &ms, arena,
                    af_mha_f32_workspace_bytes(&ms), 0);
    r |= af_mha_f32_ex(fbuf + 3500, fbuf + 256, fbuf + 256, fbuf + 256, 0, &mw, 0.5f, &ms, &o,
                       arena, af_mha_f32_workspace_bytes(&ms), 0);
  }
  r |= af_layernorm_f32(fbuf + 3600, fbuf, 0, 0, 8, 1e-5f);
  r |= af_rmsnorm_f32(fbuf + 3600, fbuf, 0, 8, 1e-5f);
  r |= af_linear_f32(fbuf + 3700, fbuf, fbuf + 8, 0, 8, 8);
  r |= af_relu_f32(fbuf + 3700, 8);
  r |= af_add_f32(fbuf + 3700, fbuf, 8);
  for (k = 0; k < 8; ++k) { qm[k].mult = 1 << 30; qm[k].shift = 0; i32buf[k] = 1 << 10; }
  r |= af_quantize_multiplier(qm, 0.5);
  r |= af_linear_s8(ibuf + 512, ibuf, ibuf + 64, 0, qm, 8, 8);
  r |= af_linear_s8_residual(i32buf, ibuf, ibuf + 64, 0, qm, 8, 8);
  r |= af_layernorm_s8(ibuf + 600, i32buf, i32buf, i32buf, 8, 1);
  r |= af_relu_s8(ibuf + 600, 8);
  r |= af_dump_begin(sink, 0, "c", "sdpa", "micro-f32") | af_dump_tensor(sink, 0, "out", AF_DUMP_F32, 2, dims);
  r |= af_dump_part(sink, 0, "out", AF_DUMP_F32, 0, fbuf, 8) | af_dump_done(sink, 0, "c");
  {
    af_kv_cache_s8 c8;
    static int8_t k8s[2 * 16 * 8], v8s[2 * 8 * 16];
    static int16_t c15[4], s15[4];
    static int8_t table[256];
    r |= af_kv_cache_s8_init(&c8, k8s, v8s, 1, 8, 8, 16, 0);
    r |= af_kv_cache_s8_append(&c8, ibuf, ibuf);
    r |= af_decode_s8(ibuf + 700, ibuf, &c8, 2, &p, 0, arena, af_decode_s8_workspace_bytes(&c8, 2));
    r |= af_rope_table_f32(fbuf + 3800, fbuf + 3804, 3, 8, 10000.0);
    r |= af_rope_f32(fbuf + 3810, 1, 8, fbuf + 3800, fbuf + 3804, AF_ROPE_HALF);
    r |= af_rope_table_s8(c15, s15, 3, 8, 10000.0);
    r |= af_rope_s8(ibuf + 720, 1, 8, c15, s15, AF_ROPE_INTERLEAVED);
    r |= af_silu_f32(fbuf + 3820, 8) | af_gelu_f32(fbuf + 3830, 8);
    r |= af_swiglu_f32(fbuf + 3840, fbuf, fbuf + 8, 8);
    r |= af_rmsnorm_s8_fold(i32buf + 32, &wsum, fbuf, 8, 1.f / 4096, 0.02f, 1e-5f);
    r |= af_rmsnorm_s8(ibuf + 740, i32buf, i32buf + 32, 8, 1);
    r |= af_act_table_s8(table, AF_ACT_SILU, 0.05f, 0.04f);
    r |= af_act_s8(ibuf + 760, 8, table);
    r |= af_swiglu_s8(ibuf + 780, ibuf, ibuf + 8, 8, table, qm[0]);
  }
  {
    af_mha_shape ms8 = {1, 2, 2, 8, 2, 1, AF_CAUSAL_NONE};
    af_mha_weights_s8 w8 = {ibuf, ibuf + 64, ibuf + 64, ibuf + 128, 0, 0, 0, 0, qm, qm, qm, qm};
    r |= af_mha_s8(ibuf + 800, ibuf, ibuf, ibuf, 0, &w8, &p, &ms8, 0, arena,
                   af_mha_s8_workspace_bytes(&ms8), 0);
  }
  r += af_s8_exp2_neg_q15(3) == 0;
  r += af_s8_mul_by_qmult(5, qm[0]) == 12345;
  return r + (af_status_name((af_status)r)[0] == 0);
}
C
# Every function declared in micro.h must be called above.
missing=$(grep -oE '\baf_[a-z_0-9]+\(' "$ROOT/include/attnflow/micro.h" | tr -d '(' | sort -u |
  while read -r fn; do grep -q "\b$fn(" "$LINKT.c" || echo "$fn"; done)
[[ -z $missing ]] || fail "link_test does not call: $missing"
$cc $(edge_cflags $t) -O2 $WARN $INC -c "$LINKT.c" -o "$LINKT.o"
$cc $(edge_cflags $t) -O2 $(edge_ldflags $t) -Wl,--wrap=malloc,--wrap=free,--wrap=calloc,--wrap=realloc \
  -o "$LINKT.elf" "$LINKT.o" "$COMPONENT_LIB" -lm || fail "micro.h entry points do not all link from the ESP-IDF component's library (without the allocator)"
edge_qemu $t "$LINKT.elf" > "$LINKT.txt" 2>&1 || fail "link test program returned non-zero"
# ... and the wrap does catch an allocation (the check can fail).
printf '#include <stdlib.h>\nint main(void){ void* p = malloc(4); free(p); return p == 0; }\n' > "$LINKT.neg.c"
if $cc $(edge_cflags $t) -O2 $(edge_ldflags $t) -Wl,--wrap=malloc,--wrap=free,--wrap=calloc,--wrap=realloc \
  -o "$LINKT.neg.elf" "$LINKT.neg.c" > /dev/null 2>&1; then
  fail "the allocator wrap did not reject a malloc call"
fi
log "link test: every micro.h entry point links from the ESP-IDF component's library and runs with malloc/free/calloc/realloc poisoned"

# 6. Stage dumps over the "UART" (semihosting stdout) of rv32imc, checked on
# the host by `attnflow verify --compare`.
build_harness $t "$OUT/$t" "$OUT/plant" "$OUT/plant/dump.elf" -DAF_HARNESS_DUMP
edge_qemu $t "$OUT/plant/dump.elf" > "$OUT/plant/dump_uart.log" 2>&1 || fail "dump harness failed on $t"
for c in sdpa_basic:micro-f32 sdpa_boolmask_2d:micro-f32 sdpa_boolmask_2d:micro-s8 mha_self_e16_h4:micro-f32; do
  name=${c%%:*}
  impl=${c#*:}
  expected=$ROOT/tests/data/golden/$name.safetensors
  if [[ $impl == micro-s8 ]]; then
    "$CLI" export-c "$expected" --out "$OUT/plant/$name.s8.h" --s8-expected "$OUT/plant/$name.s8.safetensors" > /dev/null
    expected=$OUT/plant/$name.s8.safetensors
  fi
  "$CLI" verify --compare "$OUT/plant/dump_uart.log" "$expected" --case "$name" --device-impl "$impl" \
    > "$OUT/plant/verify_$name.$impl.txt" 2>&1 ||
    fail "verify --compare of the $t dump of $name ($impl): $(cat "$OUT/plant/verify_$name.$impl.txt")"
done
# A changed value in the log (checksum recomputed, as a faulty port would
# print it) is named at its stage.
python3 - "$OUT/plant/dump_uart.log" "$OUT/plant/dump_bad.log" <<'PY'
import struct, sys
lines = open(sys.argv[1]).read().split("\n")
out, block, part, done = [], None, None, False
for ln in lines:
    w = ln.split()
    if w[:2] == ["AFDUMP", "attnflow-dump/1"]:
        block = ln
    target = block and "case=sdpa_boolmask_2d" in block and "impl=micro-f32" in block
    if not done and target and w[:3] == ["AFDUMP", "part", "masked"]:
        part, vals = [], None
    if part is not None and w[:2] == ["AFDUMP", "d"]:
        if not part:  # first value of the part: +1.0 (or 0.0 for -inf)
            x = struct.unpack("<f", bytes.fromhex(w[2])[::-1])[0]
            x = 0.0 if x == float("-inf") else x + 1.0
            w[2] = struct.pack(">f", x).hex()
            ln = " ".join(w)
        part += w[2:]
    if part is not None and w[:2] == ["AFDUMP", "end"]:
        h = 0x811C9DC5
        for v in part:
            for b in bytes.fromhex(v)[::-1]:
                h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
        w[-1] = "%08x" % h
        ln, part, done = " ".join(w), None, True
    out.append(ln)
open(sys.argv[2], "w").write("\n".join(out))
PY
set +e
"$CLI" verify --compare "$OUT/plant/dump_bad.log" "$ROOT/tests/data/golden/sdpa_boolmask_2d.safetensors" \
  --case sdpa_boolmask_2d --device-impl micro-f32 > "$OUT/plant/verify_bad.txt" 2>&1
rc=$?
set -e
((rc == 1)) && grep -q "FIRST MISMATCH: stage 'masked'" "$OUT/plant/verify_bad.txt" ||
  fail "verify --compare did not name stage 'masked' in a dump with a changed value (exit $rc): $(cat "$OUT/plant/verify_bad.txt")"
log "stage dumps: $t AFDUMP log of 4 case x path blocks verified on the host by attnflow verify --compare"

# 7a. No heap, stdio, abort or C++ runtime in the library objects.
for t in "${EDGE_TARGETS[@]}"; do
  bad=$("$(edge_prefix "$t")nm" -u "$OUT/$t"/af_*.o | grep -E ' (malloc|free|calloc|realloc|_Znw|_Zna|_Zdl|_Zda|printf|puts|fprintf|abort|exit|__cxa)' || true)
  [[ -z $bad ]] || fail "$t: forbidden symbols in the micro library: $bad"
done
# 7b. No soft-float call in the rv32imc int8 kernel objects.
SOFTFLOAT='__(add|sub|mul|div|neg|cmp|eq|ne|lt|le|gt|ge|unord|fix|fixuns|float|floatun|extend|trunc)[a-z]*[sdt]f[0-9]?$'
S8_OBJS=("$OUT/rv32imc/af_sdpa_s8.o" "$OUT/rv32imc/af_nn_s8.o" "$OUT/rv32imc/af_mha_s8.o" "$OUT/rv32imc/tiny_s8_main.o" "$OUT/rv32imc/tiny_llama_s8_main.o")
sf=$(riscv64-unknown-elf-nm -u "${S8_OBJS[@]}" | grep -E "$SOFTFLOAT" || true)
[[ -z $sf ]] || fail "soft-float calls in the rv32imc int8 objects: $sf"
# Float instructions (F extension mnemonics start with f: flw, fadd.s, fcvt...):
# none in the int8 objects; the same count finds them in an rv32imfc build of
# the f32 kernel, so it is not blind.
float_insns() { riscv64-unknown-elf-objdump -d "$@" | awk -F'\t' 'NF >= 3 && $3 ~ /^f/ {n++} END {print n + 0}'; }
fi_s8=$(float_insns "${S8_OBJS[@]}")
((fi_s8 == 0)) || fail "$fi_s8 float instructions in the rv32imc int8 objects"
riscv64-unknown-elf-gcc -march=rv32imfc -mabi=ilp32f -O2 --specs=picolibc.specs -std=c99 $INC \
  -c "$ROOT/micro/src/af_sdpa_f32.c" -o "$OUT/rv32imc/f32_hardfloat_probe.o"
fi_probe=$(float_insns "$OUT/rv32imc/f32_hardfloat_probe.o")
((fi_probe > 0)) || fail "float-instruction check is blind: none found in an rv32imfc f32 build"
(($(riscv64-unknown-elf-nm -u "$OUT/rv32imc/af_sdpa_f32.o" | grep -cE "$SOFTFLOAT" || true) > 0)) ||
  fail "soft-float check is blind: found no soft-float call in the f32 object either"
log "rv32imc af_sdpa_s8.o, af_nn_s8.o, af_mha_s8.o, both int8 tiny decoders: no soft-float calls and no float instructions (the same checks find $(riscv64-unknown-elf-nm -u "$OUT/rv32imc/af_sdpa_f32.o" | grep -cE "$SOFTFLOAT") soft-float calls in af_sdpa_f32.o and $fi_probe float instructions in its rv32imfc build)"
log "all edge checks passed ($(( $(date +%s) - t0 ))s)"
