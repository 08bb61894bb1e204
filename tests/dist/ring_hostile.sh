#!/usr/bin/env bash
# ring_hostile.sh — hostile starts of `attnflow ring` and `ring verify CASE`
# under mpirun (ctest mpi.ring_hostile; docs/errors.md rows H16-H18).
#
#   ring_hostile.sh ATTNFLOW_CLI "MPIRUN;ARGS;..." SOURCE_DIR
#
# 1. The cases of tests/regress/generators/ring.sh: two ranks started with
#    different arguments (one wrong), --timeout 3: exit 2 within LIMIT s (an
#    option error used to wait 60 s whatever --timeout said), and attnflow's
#    own message (verify on one rank and bench on the other used to end in
#    Open MPI's error text only).
# 2. ring verify CASE...: every committed golden case through the ring
#    (prefill zigzag and contiguous, sharded decode) matches the case's
#    stages (or is skipped, saying why); a copy of a case whose expected
#    "out" was changed by 1.0 in one element must FAIL (exit 1, "FIRST
#    MISMATCH" naming stage 'out'), and a corrupt case is invalid (exit 2).
# Only processes this script started are signalled (timeout's children).
set -u
CLI=$1
IFS=';' read -r -a MPIRUN <<< "$2"
SRC=$3
LIMIT=${RING_HOSTILE_LIMIT_S:-30}
PY=${PYTHON:-$( [[ -x $SRC/.cache/venv/bin/python ]] && echo "$SRC/.cache/venv/bin/python" || echo python3)}
TMP=$(mktemp -d)
fails=0
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# shellcheck source=../regress/generators/ring.sh
source "$SRC/tests/regress/generators/ring.sh"
CASE=$SRC/tests/data/golden/sdpa_causal_tl_lq13_lk7.safetensors

# 1. Hostile starts.
while IFS='|' read -r label a0 a1 regex; do
  a0=${a0//@CASE@/$CASE}
  a1=${a1//@CASE@/$CASE}
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout -k 5 $((LIMIT + 60)) "${MPIRUN[@]}" -np 1 "$CLI" $a0 : -np 1 "$CLI" $a1 </dev/null \
    >"$TMP/out.log" 2>&1
  rc=$?
  el=$(( $(date +%s) - t0 ))
  echo "$label: exit $rc after ${el}s"
  [[ $rc == 2 ]] || { fail "$label: exit $rc, expected 2"; tail -5 "$TMP/out.log"; }
  (( el <= LIMIT )) || fail "$label: took ${el}s (limit ${LIMIT}s; --timeout was 3)"
  grep -Eq "attnflow ring: error: .*$regex" "$TMP/out.log" ||
    { fail "$label: no 'attnflow ring: error: ... $regex'"; tail -8 "$TMP/out.log"; }
  grep -m1 "attnflow ring: error" "$TMP/out.log"
done < <(ring_cases)

# 2. Golden cases through the ring.
run_cases() {  # NP MODE-ARGS... : runs every committed case, expects exit 0
  local np=$1; shift
  "${MPIRUN[@]}" -np "$np" "$CLI" ring verify "$@" "$SRC"/tests/data/golden/*.safetensors \
    >"$TMP/cases.log" 2>&1
  local rc=$?
  local summary
  summary=$(tail -1 "$TMP/cases.log")
  echo "ring verify (np $np $*): exit $rc: $summary"
  [[ $rc == 0 ]] || { fail "ring verify np $np $*: exit $rc"; grep -B3 "MISMATCH\|error" "$TMP/cases.log" | head -30; }
  [[ $summary =~ ([0-9]+)\ match,\ 0\ differ,\ 0\ invalid ]] || fail "ring verify np $np $*: summary '$summary'"
  (( ${BASH_REMATCH[1]:-0} >= 30 )) || fail "ring verify np $np $*: only ${BASH_REMATCH[1]:-0} cases matched"
}
run_cases 3
run_cases 2 --layout contiguous
run_cases 4 decode

# A case whose expected out differs by 1.0 in one element must fail.
"$PY" - "$CASE" "$TMP/bad.safetensors" <<'PYEOF'
import json, struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
t = h['out']
assert t['dtype'] == 'F32'
off = 8 + n + t['data_offsets'][0] + 4 * 5
v = struct.unpack('<f', b[off:off + 4])[0]
b[off:off + 4] = struct.pack('<f', v + 1.0)
open(sys.argv[2], 'wb').write(b)
PYEOF
"${MPIRUN[@]}" -np 3 "$CLI" ring verify "$TMP/bad.safetensors" >"$TMP/bad.log" 2>&1
rc=$?
echo "changed case: exit $rc"
[[ $rc == 1 ]] || { fail "changed case: exit $rc, expected 1"; cat "$TMP/bad.log"; }
grep -q "FIRST MISMATCH: stage 'out'" "$TMP/bad.log" || { fail "changed case: no FIRST MISMATCH in 'out'"; cat "$TMP/bad.log"; }

# A truncated case is invalid on every rank: exit 2, one error line.
head -c 100 "$CASE" >"$TMP/trunc.safetensors"
"${MPIRUN[@]}" -np 2 "$CLI" ring verify "$TMP/trunc.safetensors" >"$TMP/trunc.log" 2>&1
rc=$?
echo "truncated case: exit $rc"
[[ $rc == 2 ]] || { fail "truncated case: exit $rc, expected 2"; cat "$TMP/trunc.log"; }
grep -q "attnflow ring: error: .*trunc.safetensors" "$TMP/trunc.log" || { fail "truncated case: no error naming the file"; cat "$TMP/trunc.log"; }

if (( fails )); then echo "ring_hostile: $fails failure(s)"; exit 1; fi
echo "ring_hostile: PASS"
