#!/usr/bin/env bash
# tools/ci/aarch64.sh — cross-build attnflow for aarch64 Linux and run the
# kernel, decode, reference and ops tests under qemu-aarch64 (qemu-user).
# Called by `./run test` (full) and `./run aarch64`; docs/aarch64.md.
#
# Steps: (1) install what is missing: g++-aarch64-linux-gnu and qemu-user
# (tools/deps/aarch64.apt), then the :arm64 multiarch libraries after
# `dpkg --add-architecture arm64`; (2) configure build-aarch64/ with
# cmake/toolchains/aarch64-linux-gnu.cmake (no OpenBLAS, no benchmarks) and
# build the whole library plus the selected test executables; (3) run them
# under `qemu-aarch64 -cpu max`, two at a time, and print one summary line.
#
# Invariants:
# - Exit status is non-zero if anything fails: install, configure, build, a
#   test, a test that is listed as a known aarch64 failure but now passes (so
#   the list cannot go stale) or crashes, hangs or is not found, or a kernels_test run that did not report NEON
#   among the SIMD targets exercised (the architecture-specific code must run,
#   not just compile).
# - Tests that need model files or the x86 CLI are not selected; no network
#   is used after apt.
# - The `timeout` per executable only guards CI against an emulator hang; it
#   is not a time limit inside a unit test.
#
# Environment: ATTNFLOW_AARCH64_BUILD_DIR (default build-aarch64),
# ATTNFLOW_QEMU_CPU (default max: NEON, SVE, SVE2, ... as qemu emulates),
# ATTNFLOW_AARCH64_JOBS (default nproc).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${ATTNFLOW_AARCH64_BUILD_DIR:-$ROOT/build-aarch64}
CPU=${ATTNFLOW_QEMU_CPU:-max}
JOBS=${ATTNFLOW_AARCH64_JOBS:-$(nproc 2>/dev/null || echo 2)}
GUARD_SECONDS=1800
log() { printf '[aarch64] %s\n' "$*" >&2; }

# Test executables (tests/**/NAME.cc) and the gtest filter for each.
# Selected: every test of the ops layer that runs without model files.
# Longest first (kernels_test ~110 s, decode_test ~50 s under qemu); an
# executable may appear more than once with disjoint filters (kernels_test is
# split in two halves of ~50 s so that the two qemu jobs finish together).
TESTS=(
  "kernels_test:Prefill.SweepAgainstReference"
  "kernels_test:*-Prefill.SweepAgainstReference"
  "decode_test:*"
  "reference_test:*"
  "fault_numerics_test:*"
  "nn_blocks_test:*"
  "nn_positions_test:*"
  "ops_test:*"  # every op (GEMM, quantised matmul, norms, activations, softmax, RoPE) on NEON
  # The GGUF types of issue 14 (Q4_0 Q8_0 Q5_0 Q5_1 Q4_K Q5_K Q6_K): both
  # QMatMul paths' on-the-fly weights equal DequantizeRow bit for bit on NEON.
  # (The float64/thread-count sweep of the same file is x86-only: ~1.5 min here.)
  "qmatmul_quant_test:*OnTheFlyWeightsEqualDequantizeRowOnBothPaths*"
)
# Known failures on aarch64 (EXECUTABLE:TEST). Each is run on its own and must
# still fail; if it passes, remove it here (the run fails until then).
KNOWN_FAILURES=(
  # None. (The six NaN/inf-propagation tests that failed here passed once
  # Exp2 in src/kernels/flash_common-inl.h passed NaN through on Arm, where
  # hn::Max is vmaxnm and drops a NaN operand; docs/aarch64.md.)
)

# ---------------------------------------------------------------------------
# 1. Dependencies.
install_deps() {
  local SUDO="" missing=() p
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  local apt=($SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -qq)
  local host_pkgs arm_pkgs=(libhwy-dev:arm64 libgtest-dev:arm64 libc6:arm64 libstdc++6:arm64)
  host_pkgs=$(sed 's/#.*//' "$ROOT/tools/deps/aarch64.apt" | tr -s ' \n' ' ')
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    log "enabling the arm64 dpkg architecture"
    $SUDO dpkg --add-architecture arm64
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  fi
  for p in $host_pkgs "${arm_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing: ${missing[*]}"
    # arm64 package lists may be missing if the architecture was added by
    # someone else without an update since.
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
    "${apt[@]}" install "${missing[@]}" >/dev/null
  fi
}

# ---------------------------------------------------------------------------
# 2. Cross build.
build() {
  local names=() t
  for t in "${TESTS[@]}" "${KNOWN_FAILURES[@]}"; do names+=("${t%%:*}"); done
  mapfile -t names < <(printf '%s\n' "${names[@]}" | sort -u)
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/toolchains/aarch64-linux-gnu.cmake" \
    -DATTNFLOW_BUILD_BENCH=OFF -DATTNFLOW_TESTS_BUILD_CLI=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_BLAS=ON >/dev/null
  # The test executables depend on the library (all of src/), so this
  # cross-builds the whole library; none of them runs the CLI, so it is not
  # built (ATTNFLOW_TESTS_BUILD_CLI=OFF).
  cmake --build "$BUILD" -j "$JOBS" --target "${names[@]}"
}

# ---------------------------------------------------------------------------
# 3. Run under qemu. One log per job (NAME-INDEX.log) in $BUILD/aarch64-logs/.
run_one() {  # NAME FILTER LOG
  local exe
  exe=$(find "$BUILD" -maxdepth 3 -type f -name "$1" -perm -u+x | head -1)
  [[ -n $exe ]] || { echo "no executable $1 in $BUILD" >"$3"; return 1; }
  (cd "$BUILD" && timeout "$GUARD_SECONDS" qemu-aarch64 -cpu "$CPU" "$exe" \
     --gtest_filter="$2" --gtest_color=no) >"$3" 2>&1
}

main() {
  local t0 t1 t2
  t0=$(date +%s)
  install_deps
  t1=$(date +%s)
  build
  t2=$(date +%s)
  log "installed in $((t1 - t0))s, built in $((t2 - t1))s; running tests under qemu-aarch64 -cpu $CPU"

  local logs=$BUILD/aarch64-logs
  rm -rf "$logs" && mkdir -p "$logs"
  # Known failures are excluded from the regular runs and run on their own.
  local -A excluded=()
  local k name filter
  for k in "${KNOWN_FAILURES[@]}"; do excluded[${k%%:*}]+=":${k#*:}"; done
  local -a jobs=()
  for t in "${TESTS[@]}"; do
    name=${t%%:*}
    filter=${t#*:}
    if [[ -n ${excluded[$name]:-} ]]; then
      [[ $filter == *-* ]] && filter+="${excluded[$name]}" || filter+="-${excluded[$name]#:}"
    fi
    jobs+=("$name|$filter|$logs/$name-${#jobs[@]}.log")
  done
  local i=0
  for k in "${KNOWN_FAILURES[@]}"; do
    jobs+=("${k%%:*}|${k#*:}|$logs/known-failure-$i.log")
    i=$((i + 1))
  done

  # Run two (JOBS) at a time; the longest first.
  local -a pids=() specs=()
  local failed=() still_failing=() now_passing=() passed=0 spec rc
  start() {
    IFS='|' read -r name filter lg <<<"$1"
    run_one "$name" "$filter" "$lg" &
    pids+=($!)
    specs+=("$1")
  }
  reap() {  # wait for the oldest job
    local pid=${pids[0]} s=${specs[0]}
    pids=("${pids[@]:1}")
    specs=("${specs[@]:1}")
    rc=0
    wait "$pid" || rc=$?
    IFS='|' read -r name filter lg <<<"$s"
    if [[ $lg == */known-failure-* ]]; then
      # Expected: gtest ran the one test and it failed (rc 1). A pass, a
      # crash, a hang or a missing test is a problem.
      if ((rc == 1)) && grep -q '^\[  FAILED  \] 1 test, listed below' "$lg"; then
        still_failing+=("$name:$filter")
      elif ((rc == 0)) && grep -q '^\[  PASSED  \] 1 test\.' "$lg"; then
        now_passing+=("$name:$filter")
      else
        failed+=("known failure $name:$filter did not fail cleanly (rc=$rc, log $lg)")
      fi
    elif ((rc == 0)); then
      passed=$((passed + $(grep -c '^\[       OK \]' "$lg" || true)))
      log "ok   $name ($(grep -o '^\[==========\] .* ran\. ([0-9]* ms total)' "$lg" | sed 's/.*(//; s/ total)//'))"
    else
      failed+=("$name (rc=$rc, log $lg)")
      log "FAIL $name (rc=$rc):"
      { grep -E '^\[  FAILED  \]|Failure$' "$lg" || tail -20 "$lg"; } | head -20 >&2
    fi
  }
  for spec in "${jobs[@]}"; do
    while ((${#pids[@]} >= JOBS)); do reap; done
    start "$spec"
  done
  while ((${#pids[@]})); do reap; done

  # The SIMD targets the kernels ran on (kernels_test's Targets test).
  local targets
  targets=$(cat "$logs"/kernels_test-*.log 2>/dev/null | sed -n 's/^kernel targets exercised: //p' || true)
  if [[ " $targets " != *" NEON "* ]]; then
    failed+=("kernels_test did not report NEON among the targets exercised ('${targets}')")
  fi
  for k in "${still_failing[@]}"; do log "known aarch64 failure still fails (expected): $k"; done
  for k in "${now_passing[@]}"; do
    failed+=("known failure now passes: remove '$k' from KNOWN_FAILURES in tools/ci/aarch64.sh")
  done

  local t3
  t3=$(date +%s)
  if ((${#failed[@]})); then
    local f
    for f in "${failed[@]}"; do log "FAILED: $f"; done
    log "aarch64: FAILED (${#failed[@]} problem(s)); $passed tests passed under qemu-aarch64 -cpu $CPU; build $((t2 - t1))s, tests $((t3 - t2))s"
    return 1
  fi
  log "aarch64: PASSED $passed tests under qemu-aarch64 -cpu $CPU, kernel SIMD targets: ${targets% }; known failures: ${#still_failing[@]}; build $((t2 - t1))s, tests $((t3 - t2))s (apt $((t1 - t0))s)"
}

main "$@"
