#!/usr/bin/env bash
# ring_fail.sh — failure behaviour of `attnflow ring` under mpirun (ctest mpi.ring_fail).
#
#   ring_fail.sh ATTNFLOW_CLI "MPIRUN;ARGS;..."   (the mpirun command as a CMake list)
#
# 1. kill -9 one rank mid-run: every rank and mpirun must be gone within LIMIT s,
#    exit status non-zero, mpirun naming the killed rank.
# 2. SIGSTOP one rank mid-run (a stalled peer): the others time out (--timeout 3),
#    print "no message within 3 s" and abort the job within LIMIT s.
# 3. bad shapes (num_heads not a multiple of num_kv_heads): every rank prints the
#    same message and the job exits 2.
# Only processes this script started (mpirun's children) are signalled, by pid.
set -u
CLI=$1
IFS=';' read -r -a MPIRUN <<< "$2"
LIMIT=${RING_FAIL_LIMIT_S:-30}
TMP=$(mktemp -d)
fails=0
declare -a OURS=()
cleanup() { for p in "${OURS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Starts a long bench in the background; sets MPID and RANKS once 2 iterations ran.
start_bench() {
  local log=$1
  "${MPIRUN[@]}" -np 3 "$CLI" ring bench prefill --q-len 3000 --heads 2 --kv-heads 1 \
    --head-dim 32 --iters 100000 --timeout 3 >"$log" 2>&1 &
  MPID=$!
  OURS+=("$MPID")
  local t0=$SECONDS
  until grep -q "iteration 2 of" "$log"; do
    if (( SECONDS - t0 > 120 )) || ! kill -0 "$MPID" 2>/dev/null; then
      fail "bench did not start"; cat "$log"; return 1
    fi
    sleep 0.2
  done
  mapfile -t RANKS < <(pgrep -P "$MPID")
  OURS+=("${RANKS[@]}")
  if (( ${#RANKS[@]} != 3 )); then fail "expected 3 rank processes, found ${#RANKS[@]}"; return 1; fi
}

# Waits for mpirun to exit; sets RC and ELAPSED (seconds since $1).
wait_exit() {
  local t0=$1
  while kill -0 "$MPID" 2>/dev/null; do
    if (( $(date +%s) - t0 > LIMIT )); then break; fi
    sleep 0.2
  done
  ELAPSED=$(( $(date +%s) - t0 ))
  if kill -0 "$MPID" 2>/dev/null; then RC=hung; else wait "$MPID"; RC=$?; fi
  for p in "${RANKS[@]}"; do
    if kill -0 "$p" 2>/dev/null && [[ $(ps -o stat= -p "$p") != Z* ]]; then
      fail "rank process $p still alive"
    fi
  done
}

# 1. A rank dies.
if start_bench "$TMP/kill.log"; then
  t0=$(date +%s)
  kill -9 "${RANKS[1]}"
  wait_exit "$t0"
  echo "kill: mpirun exit $RC after ${ELAPSED}s"
  [[ $RC == hung ]] && fail "kill: job still running after ${LIMIT}s"
  [[ $RC == 0 ]] && fail "kill: exit status 0"
  grep -q "signal 9" "$TMP/kill.log" || { fail "kill: no message naming the killed rank"; tail -20 "$TMP/kill.log"; }
fi

# 2. A rank stalls (stopped): the others' message timeout fires.
if start_bench "$TMP/stop.log"; then
  t0=$(date +%s)
  kill -STOP "${RANKS[2]}"
  wait_exit "$t0"
  echo "stall: mpirun exit $RC after ${ELAPSED}s"
  [[ $RC == hung ]] && fail "stall: job still running after ${LIMIT}s"
  [[ $RC == 0 ]] && fail "stall: exit status 0"
  grep -q "no message within 3 s" "$TMP/stop.log" || { fail "stall: no timeout message"; tail -20 "$TMP/stop.log"; }
  grep "no message within" "$TMP/stop.log" | head -2
fi

# 3. Bad shapes: the same message on every rank, exit 2.
"${MPIRUN[@]}" -np 3 "$CLI" ring bench prefill --q-len 100 --heads 8 --kv-heads 3 \
  --iters 1 >"$TMP/bad.log" 2>&1
rc=$?
[[ $rc == 2 ]] || fail "bad shapes: exit $rc, expected 2"
n=$(grep -c "attnflow ring: error: rank" "$TMP/bad.log")
distinct=$(grep "attnflow ring: error: rank" "$TMP/bad.log" | sed 's/rank [0-9]*: //' | sort -u | wc -l)
[[ $n == 3 && $distinct == 1 ]] || { fail "bad shapes: $n error lines, $distinct distinct (want 3, 1)"; cat "$TMP/bad.log"; }
grep -m1 "attnflow ring: error" "$TMP/bad.log"

if (( fails )); then echo "ring_fail: $fails failure(s)"; exit 1; fi
echo "ring_fail: PASS"
