#!/usr/bin/env bash
# tools/fuzz/run_fuzz.sh — build attnflow's libFuzzer targets (fuzz/CMakeLists.txt:
# clang + libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer) and run them.
#
#   tools/fuzz/run_fuzz.sh [options] DURATION [TARGET...]
#   tools/fuzz/run_fuzz.sh --replay [TARGET...]
#
# DURATION   time PER TARGET: 20, 20s, 5m, 1h (with --total: the whole budget,
#            split evenly over the targets)
# TARGET     harness names (fuzz/targets/<name>.h); default: every target
# --replay   no fuzzing: run every committed input (fuzz/corpus/<t>/ seeds and
#            tests/regress/<t>/ crash reproducers) once through each target
# --total    see DURATION
# --jobs N   fuzz N targets at once (default 1: CI machines have 2 cores and
#            each target also runs the library's worker threads)
# --keep-corpus  grow build-fuzz/corpus/<t>/ across runs (default: a fresh
#            working corpus per run, seeded from fuzz/corpus/<t>/)
# --out DIR  where results go (default build-fuzz/results/<timestamp>)
# --seed N   libFuzzer's random seed (default: a new one each run); run k of
#            a target after a crash uses N+k. `./run test` fuzzes with a fixed
#            seed so that CI is a reproducible regression smoke (a failure
#            replays exactly; a local run of the same seed predicts CI);
#            campaigns (`./run fuzz 30m`) take new seeds to explore.
#
# Environment: ATTNFLOW_FUZZ_BUILD (build dir, default <repo>/build-fuzz),
# ATTNFLOW_FUZZ_RSS_MB (memory limit, default 2048), ATTNFLOW_FUZZ_TIMEOUT
# (seconds one input may take, default 25), ATTNFLOW_FUZZ_BUILD_JOBS (-j, 2),
# ATTNFLOW_FUZZ_RESTARTS (restarts after a crash within the duration, 3),
# ATTNFLOW_FUZZ_KERNELS (fast | sanitized: how the SIMD kernels are built,
# see fuzz/CMakeLists.txt; use another ATTNFLOW_FUZZ_BUILD for sanitized),
# ATTNFLOW_FUZZ_SIMD (native, the default: the SIMD files are compiled for
# this machine's targets only; all: every target, as ATTNFLOW_FUZZ_HWY needs),
# ATTNFLOW_FUZZ_HWY (attention target: run with the Highway target set to
# e.g. AVX2 or EMU128 instead of the best one the CPU has).
#
# Exit: 0 no crash, leak, timeout or out-of-memory; 1 at least one (the
# reproducers are listed: copy each into tests/regress/<target>/ once fixed,
# see docs/fuzzing.md); 2 usage or build error.
# Prints a markdown table (also $OUT/summary.md): executions, exec/s, crashes,
# edge coverage (covered / instrumented), corpus size, per target.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD=${ATTNFLOW_FUZZ_BUILD:-$ROOT/build-fuzz}
RSS_MB=${ATTNFLOW_FUZZ_RSS_MB:-2048}
TIMEOUT=${ATTNFLOW_FUZZ_TIMEOUT:-25}
BUILD_JOBS=${ATTNFLOW_FUZZ_BUILD_JOBS:-2}
RESTARTS=${ATTNFLOW_FUZZ_RESTARTS:-3}

log() { printf '[fuzz] %s\n' "$*" >&2; }
die() { log "$*"; exit 2; }

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

replay=0 total=0 jobs=1 keep=0 out="" duration="" seed=${ATTNFLOW_FUZZ_SEED:-}
targets=()
while (($#)); do
  case "$1" in
    --replay) replay=1 ;;
    --total) total=1 ;;
    --jobs) jobs=${2:?}; shift ;;
    --keep-corpus) keep=1 ;;
    --out) out=${2:?}; shift ;;
    --seed) seed=${2:?}; shift ;;
    -h|--help) usage ;;
    -*) die "unknown option $1" ;;
    *) if [[ -z $duration && $replay -eq 0 ]]; then duration=$1; else targets+=("$1"); fi ;;
  esac
  shift
done

to_seconds() {
  local d=$1
  case "$d" in
    *h) echo $(( ${d%h} * 3600 )) ;;
    *m) echo $(( ${d%m} * 60 )) ;;
    *s) echo "${d%s}" ;;
    *) echo "$d" ;;
  esac
}
if ((replay == 0)); then
  [[ -n $duration ]] || usage
  [[ $(to_seconds "$duration") =~ ^[0-9]+$ ]] || die "bad DURATION '$duration' (e.g. 20s, 5m, 1h)"
fi

# ---- build ------------------------------------------------------------------
command -v clang++ >/dev/null || die "clang++ not found (Debian: apt-get install clang libclang-rt-14-dev llvm; tools/deps/fuzz.apt)"
KERNELS=${ATTNFLOW_FUZZ_KERNELS:-fast}
# SIMD targets: this machine's own (tools/ci/hwy_native.sh: SSE4 baseline, no
# EMU128; the build runs only here), unless ATTNFLOW_FUZZ_HWY asks for a
# target or ATTNFLOW_FUZZ_SIMD=all: then every target (fuzz/CMakeLists.txt).
. "$ROOT/tools/ci/hwy_native.sh"
simd_flags="" simd_off=""
if [[ -z ${ATTNFLOW_FUZZ_HWY:-} && ${ATTNFLOW_FUZZ_SIMD:-native} == native ]]; then
  simd_flags=$(hwy_native_baseline_flags)
  [[ -n $simd_flags ]] && simd_off=$(hwy_native_disabled keep-sse4)
  simd_flags=${simd_flags// /;}
fi
mkdir -p "$BUILD"
cmake -S "$ROOT/fuzz" -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_COMPILER=clang -DATTNFLOW_FUZZ_KERNELS="$KERNELS" \
  -DATTNFLOW_FUZZ_SIMD_FLAGS="$simd_flags" -DATTNFLOW_FUZZ_SIMD_DISABLED="$simd_off" \
  >"$BUILD/configure.log" 2>&1 || {
  tail -20 "$BUILD/configure.log" >&2
  die "cmake configure failed"
}
log "building fuzz targets (-j$BUILD_JOBS)"
cmake --build "$BUILD" -j "$BUILD_JOBS" >"$BUILD/build.log" 2>&1 || {
  tail -30 "$BUILD/build.log" >&2
  die "build failed (full log: $BUILD/build.log)"
}

all=()
for h in "$ROOT"/fuzz/targets/*.h; do all+=("$(basename "$h" .h)"); done
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ -x $BUILD/${t}_fuzz ]] || die "no fuzz target '$t' (have: ${all[*]})"
done

[[ -n $out ]] || out="$BUILD/results/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:handle_abort=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:symbolize=1}
command -v llvm-symbolizer >/dev/null || export ASAN_SYMBOLIZER_PATH=/usr/bin/llvm-symbolizer-14

inputs_of() {  # committed inputs of target $1, one path per line
  local d
  for d in "$ROOT/fuzz/corpus/$1" "$ROOT/tests/regress/$1"; do
    [[ -d $d ]] && find "$d" -maxdepth 1 -type f ! -name '.*' ! -name '*.md' | sort
  done
  return 0
}

# ---- replay -----------------------------------------------------------------
if ((replay)); then
  status=0
  for t in "${targets[@]}"; do
    mapfile -t files < <(inputs_of "$t")
    ((${#files[@]})) || { log "$t: no committed inputs"; continue; }
    if "$BUILD/${t}_fuzz" -rss_limit_mb="$RSS_MB" -timeout="$TIMEOUT" "${files[@]}" \
        >"$out/$t.replay.log" 2>&1; then
      log "$t: ${#files[@]} committed inputs pass"
    else
      log "$t: FAILED on a committed input (log: $out/$t.replay.log)"
      grep -E "Running:|ERROR|SUMMARY|FUZZ_CHECK" "$out/$t.replay.log" | tail -5 >&2 || true
      status=1
    fi
  done
  exit $status
fi

# ---- fuzz -------------------------------------------------------------------
secs=$(to_seconds "$duration")
((total)) && secs=$(( secs / ${#targets[@]} ))
((secs >= 1)) || secs=1
log "fuzzing ${targets[*]} for ${secs}s each ($jobs at a time${seed:+, seed $seed}); results in $out"

fuzz_one() {  # target -> writes $out/$t.{log,stats}
  local t=$1 bin="$BUILD/${1}_fuzz" work dict=() maxlen=() seedarg=() end now left run=0 rc
  if ((keep)); then work="$BUILD/corpus/$t"; else work="$out/corpus/$t"; fi
  mkdir -p "$work" "$out/artifacts/$t"
  [[ -f $ROOT/fuzz/dict/$t.dict ]] && dict=(-dict="$ROOT/fuzz/dict/$t.dict")
  [[ -n ${ATTNFLOW_FUZZ_MAX_LEN:-} ]] && maxlen=(-max_len="$ATTNFLOW_FUZZ_MAX_LEN")
  local seeds=()
  [[ -d $ROOT/fuzz/corpus/$t ]] && seeds+=("$ROOT/fuzz/corpus/$t")
  [[ -d $ROOT/tests/regress/$t ]] && seeds+=("$ROOT/tests/regress/$t")
  : >"$out/$t.log"
  end=$(( $(date +%s) + secs ))
  while :; do
    now=$(date +%s)
    left=$(( end - now ))
    ((left >= 1)) || break
    run=$((run + 1))
    [[ -n $seed ]] && seedarg=(-seed=$((seed + run - 1)))
    set +e
    ATTNFLOW_FUZZ_HWY=${ATTNFLOW_FUZZ_HWY:-} "$bin" -max_total_time="$left" -print_final_stats=1 \
      -timeout="$TIMEOUT" -rss_limit_mb="$RSS_MB" -malloc_limit_mb="$RSS_MB" \
      -artifact_prefix="$out/artifacts/$t/" -close_fd_mask=1 "${dict[@]}" "${maxlen[@]}" "${seedarg[@]}" \
      "$work" "${seeds[@]}" >>"$out/$t.log" 2>&1
    rc=$?
    set -e
    ((rc == 0)) && break
    echo "== run $run ended with exit $rc" >>"$out/$t.log"
    ((run > RESTARTS)) && break
  done
}

pids=()
for t in "${targets[@]}"; do
  fuzz_one "$t" &
  pids+=($!)
  while (( $(jobs -rp | wc -l) >= jobs )); do sleep 1; done
done
wait "${pids[@]}" 2>/dev/null || true

# ---- summary ----------------------------------------------------------------
status=0
{
  echo "| target | seconds | executions | exec/s | crashes | edges covered / instrumented | corpus |"
  echo "|---|---:|---:|---:|---:|---|---:|"
  for t in "${targets[@]}"; do
    l="$out/$t.log"
    execs=$( (grep -o 'stat::number_of_executed_units: [0-9]*' "$l" || true) | awk '{s+=$2} END {print s+0}')
    cov=$( (grep -oE 'cov: [0-9]+' "$l" || true) | tail -1 | awk '{print $2}')
    edges=$( (grep -oE 'Loaded 1 modules +\([0-9]+ inline 8-bit counters\)' "$l" || true) | head -1 | grep -oE '[0-9]+ inline' | awk '{print $1}' || true)
    corp=$(find "$( ((keep)) && echo "$BUILD/corpus/$t" || echo "$out/corpus/$t")" -type f 2>/dev/null | wc -l)
    crashes=$(find "$out/artifacts/$t" -type f 2>/dev/null | wc -l)
    eps=$(( execs / (secs > 0 ? secs : 1) ))
    pct=""
    [[ -n $cov && -n $edges && $edges -gt 0 ]] && pct=" ($(( 100 * cov / edges ))%)"
    echo "| $t | $secs | $execs | $eps | $crashes | ${cov:-?} / ${edges:-?}$pct | $corp |"
  done
} | tee "$out/summary.md"
for t in "${targets[@]}"; do
  for a in "$out/artifacts/$t"/*; do
    [[ -e $a ]] || continue
    status=1
    log "REPRODUCER $t: $a"
    log "  replay: $BUILD/${t}_fuzz $a ; once fixed: cp $a $ROOT/tests/regress/$t/"
  done
  if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|FUZZ_CHECK' "$out/$t.log"; then
    status=1
    grep -m3 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|FUZZ_CHECK' "$out/$t.log" | sed "s/^/[fuzz] $t: /" >&2
  fi
done
((status == 0)) && log "no crashes" || log "FAILURES above; logs in $out"
exit $status
