# ring.sh — generator of the hostile `attnflow ring` starts (issue 34, class
# "MPI ring"): two ranks started with different arguments (Open MPI's
# MPMD form `mpirun -np 1 A : -np 1 B`), one of them wrong, and --timeout 3
# on both. Sourced by tests/dist/ring_hostile.sh.
#
# Rule (tools/cli/cmd_ring.cc, docs/errors.md): the job ends within a few
# seconds of --timeout (never the 60 s default), exit 2, and attnflow's own
# message "attnflow ring: error: rank R: ..." on every rank, naming the
# option and whose options they are, or the two commands. A value the
# command line parser rejects (not a number, an unknown option) ends that
# rank before MPI starts: its own "attnflow ring: error: --q-len: ..." and
# mpirun ending the others at once.
#
# ring_cases prints one case per line: LABEL|RANK0 ARGS|RANK1 ARGS|REGEX
# (REGEX: grep -E pattern the output must contain).
ring_cases() {
  local b="--heads 2 --kv-heads 1 --head-dim 8 --timeout 3"
  local ok="--q-len 64 $b"
  echo "bad --causal on rank 1|ring verify $ok|ring verify $ok --causal sideways|ring: --causal must be.*options of rank 1"
  echo "bad --layout on rank 0|ring verify $ok --layout spiral|ring verify $ok|ring: --layout must be.*options of rank 0"
  echo "decode q-len on rank 1|ring verify decode $b --q-len 2|ring verify decode $b --q-len 9|decode takes 1 to 4.*options of rank 1"
  echo "unparsable value on rank 1|ring verify $ok|ring verify $b --q-len sixty|--q-len"
  echo "unknown option on rank 0|ring verify $ok --frobnicate|ring verify $ok|--frobnicate"
  echo "verify vs bench|ring verify $ok|ring bench $ok --iters 1|started with different commands"
  echo "bench vs verify|ring bench $ok --iters 1|ring verify $ok|started with different commands"
  echo "prefill vs decode|ring verify prefill $b --q-len 2|ring verify decode $b --q-len 2|started with different commands"
  echo "shapes differ|ring verify $ok|ring verify --q-len 64 --heads 4 --kv-heads 1 --head-dim 8 --timeout 3|started with different commands"
  echo "case vs random|ring verify $ok|ring verify --timeout 3 @CASE@|started with different commands"
  echo "missing case on rank 1|ring verify --timeout 3 @CASE@|ring verify --timeout 3 /nonexistent/case.safetensors|started with different commands"
  echo "shape flag with a case|ring verify --timeout 3 --heads 4 @CASE@|ring verify --timeout 3 --heads 4 @CASE@|cannot be combined with case files.*options of rank 0"
}
