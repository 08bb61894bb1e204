# tools/ci/hwy_native.sh — sourced by tools/ci/sanitize.sh and
# tools/fuzz/run_fuzz.sh: which Highway targets a build that only ever runs on
# THIS machine needs (the sanitizer and fuzz builds; never the plain build,
# whose per-target tests check every target).
#
#   hwy_native_disabled   prints an HWY_DISABLED_TARGETS value: core/hwy_targets.h's
#                         list plus every x86 target this CPU does not need
#                         (on an AVX-512 machine SSE4 and AVX2, on an AVX2
#                         machine AVX3). $1 = keep-sse4 keeps SSE4 (it is the
#                         baseline when hwy_native_baseline_flags is used).
#   hwy_native_baseline_flags
#                         prints the compiler flags that make SSE4 the
#                         baseline (-msse4.2 -mpclmul -maes) when this CPU has
#                         them, else nothing. With SSE4 as the baseline Highway
#                         does not compile its EMU128 fallback: under clang
#                         with coverage that fallback is ~70% of the compile
#                         time of a SIMD file (src/ops/gemm.cc: 103 CPU-s for
#                         SSE4+AVX2+AVX3+EMU128, of which EMU128 alone 74).
#                         (gcc compiles HWY_SCALAR instead, which is cheap: the
#                         gcc sanitizer builds keep it.)
# Invariant: the objects built with these settings run only on a CPU with the
# flags read here (/proc/cpuinfo); any other machine gets the full list.

_hwy_cpu_flags() { grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true; }
_hwy_has() { [[ " $1 " == *" $2 "* ]]; }

hwy_native_disabled() {
  local off="HWY_SSSE3|HWY_SVE|HWY_SVE2|HWY_SVE_256|HWY_SVE2_128|HWY_RVV" flags
  flags=$(_hwy_cpu_flags)
  local sse4="|HWY_SSE4"
  [[ ${1:-} == keep-sse4 ]] && sse4=""
  if _hwy_has "$flags" avx512f && _hwy_has "$flags" avx512vl && \
     _hwy_has "$flags" avx512dq && _hwy_has "$flags" avx512bw; then
    off+="$sse4|HWY_AVX2"
  elif _hwy_has "$flags" avx2 && _hwy_has "$flags" fma && _hwy_has "$flags" f16c; then
    off+="$sse4|HWY_AVX3|HWY_AVX3_DL"
  fi
  echo "$off"
}

hwy_native_baseline_flags() {
  local flags
  flags=$(_hwy_cpu_flags)
  if _hwy_has "$flags" sse4_2 && _hwy_has "$flags" pclmulqdq && _hwy_has "$flags" aes; then
    echo "-msse4.2 -mpclmul -maes"
  fi
}
