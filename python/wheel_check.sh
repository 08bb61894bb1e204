#!/usr/bin/env bash
# python/wheel_check.sh — the "installs anywhere" check of the Python
# package (called by python/run_tests.sh; docs/python.md "Wheels"):
#  1. `pip wheel` of the repository (no build isolation, pinned backend;
#     linking the main build's libraries when build/ is usable, as
#     run_tests.sh does);
#  2. `auditwheel repair` (tools/deps/wheel.pip): libhwy, and libpng when
#     the built extension links it, are copied into the wheel
#     (attnflow.libs/, renamed with a hash) and the extension's NEEDED
#     entries point to the copies;
#  3. checks that no NEEDED entry of the extension names the system
#     libhwy.so.1 / libpng16.so.16 any more;
#  4. installs the repaired wheel into a clean venv (no system site
#     packages; numpy, the only dependency, copied from the project venv);
#  5. imports it and runs an attention call with the system libhwy and
#     libpng HIDDEN: inside a private mount namespace (unshare --mount, as
#     root, or an unprivileged user namespace) /dev/null is bind-mounted over
#     every libhwy.so* and libpng16.so* of the system, and loading them
#     must fail there (so the check cannot pass by accident). Where no
#     namespace can be made, the check says so and verifies with LD_DEBUG
#     that the copies inside the wheel were the ones loaded.
# Exit status 0 only if every step passed. Nothing outside $WORK is
# modified (the bind mounts exist only inside the namespace).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${ATTNFLOW_VENV:-$ROOT/.cache/venv}
BUILD=${ATTNFLOW_BUILD:-$ROOT/build}
WORK=${ATTNFLOW_WHEEL_WORK:-$BUILD/wheel-check}
log() { printf '[wheel] %s\n' "$*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

rm -rf "$WORK" && mkdir -p "$WORK/dist" "$WORK/repaired"
prebuilt=()
if [[ -f $BUILD/CMakeCache.txt ]] && grep -q '^ATTNFLOW_PIC:BOOL=ON' "$BUILD/CMakeCache.txt" \
    && grep -q '^CMAKE_BUILD_TYPE:STRING=Release' "$BUILD/CMakeCache.txt" \
    && ! grep -q '^ATTNFLOW_SANITIZE:STRING=.' "$BUILD/CMakeCache.txt"; then
  prebuilt=(--config-settings=cmake.define.ATTNFLOW_PREBUILT="$BUILD")
fi
"$VENV/bin/pip" wheel -q --no-build-isolation --no-deps "${prebuilt[@]}" -w "$WORK/dist" "$ROOT"
wheel=$(ls "$WORK"/dist/attnflow-*.whl)
# The system libraries (of libhwy, libpng) the built extension links: each
# must be bundled by the repair. libhwy always is (the kernels); libpng only
# when the extension pulls in the PNG reader (the linker drops it otherwise).
mkdir -p "$WORK/built"
"$VENV/bin/python" -m zipfile -e "$wheel" "$WORK/built"
built_needed=$(readelf -d "$WORK"/built/attnflow/_attnflow*.so | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
grep -qx libhwy.so.1 <<<"$built_needed" || fail "the built extension does not link libhwy.so.1"
bundle=(libhwy)
grep -qx libpng16.so.16 <<<"$built_needed" && bundle+=(libpng16)
log "system libraries to bundle: ${bundle[*]}"
PATH="$VENV/bin:$PATH" "$VENV/bin/auditwheel" repair -w "$WORK/repaired" "$wheel" \
    > "$WORK/repair.log" 2>&1 || { cat "$WORK/repair.log" >&2; fail "auditwheel repair"; }
repaired=$(ls "$WORK"/repaired/attnflow-*.whl)
log "repaired: $(basename "$repaired")"

# 3. The extension must no longer need the system libraries by name.
mkdir -p "$WORK/unpacked"
"$VENV/bin/python" -m zipfile -e "$repaired" "$WORK/unpacked"
so=$(ls "$WORK"/unpacked/attnflow/_attnflow*.so)
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for lib in libhwy.so.1 libpng16.so.16; do
  grep -qx "$lib" <<<"$needed" && fail "$so still needs the system $lib"
done
for lib in "${bundle[@]}"; do
  compgen -G "$WORK/unpacked/attnflow.libs/$lib-*.so*" > /dev/null ||
    fail "no $lib-*.so* in attnflow.libs"
done

# 4. A clean venv: no system site packages, no development packages.
py=$("$VENV/bin/python" -c 'import sys; print(sys.executable)')
"$py" -m venv --without-pip "$WORK/clean"  # the project venv's pip installs into it
# numpy, the one declared dependency: its installed wheel contents (numpy/,
# numpy.libs/, the dist-info) copied from the project venv, offline.
site=$("$WORK/clean/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
src=$("$VENV/bin/python" -c 'import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))')
cp -r "$src"/numpy "$src"/numpy.libs "$src"/numpy-*.dist-info "$site"/
"$VENV/bin/pip" --python "$WORK/clean/bin/python" install -q --no-deps --no-index "$repaired"

# 5. Import and compute with the system libhwy / libpng hidden.
cat > "$WORK/probe.py" <<'PY'
import ctypes, sys
for lib in ("libhwy.so.1", "libpng16.so.16"):
    try:
        ctypes.CDLL(lib)
    except OSError:
        continue
    if sys.argv[1] == "hidden":
        sys.exit(f"the system {lib} is still loadable: the libraries were not hidden")
import numpy as np
import attnflow  # must load attnflow.libs/libhwy-*.so, libpng16-*.so
assert "torch" not in sys.modules
q = np.random.default_rng(0).standard_normal((1, 2, 9, 16)).astype(np.float32)
out = attnflow.scaled_dot_product_attention(q, q, q, is_causal=True)
ref = attnflow.reference.sdpa(q, q, q, is_causal=True)[0]
assert np.abs(out - ref).max() < 1e-5, np.abs(out - ref).max()
print("imported", attnflow.__file__, "and computed attention")
PY
hide=$(ls /usr/lib/*/libhwy.so* /usr/lib/*/libpng16.so* /lib/*/libhwy.so* /lib/*/libpng16.so* \
          2>/dev/null | sort -u | while read -r f; do [[ -f $f && ! -L $f ]] && echo "$f"; done)
script="set -e; for f in $(echo $hide); do mount --bind /dev/null \"\$f\"; done; \
\"$WORK/clean/bin/python\" \"$WORK/probe.py\" hidden"
ns=()
if unshare --mount true 2>/dev/null; then
  ns=(unshare --mount)
elif unshare --user --map-root-user --mount true 2>/dev/null; then
  ns=(unshare --user --map-root-user --mount)
fi
if ((${#ns[@]})); then
  "${ns[@]}" sh -c "$script" || fail "import with the system libraries hidden"
  log "OK: the repaired wheel imports and computes in a clean venv with $(echo $hide | wc -w) system libhwy/libpng files hidden"
else
  log "no mount namespace here: checking with LD_DEBUG which libhwy/libpng the import loads"
  LD_DEBUG=libs "$WORK/clean/bin/python" "$WORK/probe.py" visible 2> "$WORK/ld.log"
  grep -E 'calling init: .*(libhwy|libpng16)' "$WORK/ld.log" | grep -v attnflow.libs \
    && fail "a system libhwy/libpng was loaded"
  log "OK: only the copies in attnflow.libs were loaded"
fi
