#!/usr/bin/env bash
# python/run_tests.sh — the Python package's CI step (called by ./run test):
# `pip install .` of the repository into the project venv (scikit-build-core
# + nanobind from tools/deps/python.pip, no build isolation, persistent
# build tree build/python-<tag>), then the pytest suite python/tests against
# the installed package. Model weights come from tools/deps/models.pip and
# smollm2.pip in the same venv; nothing is downloaded at test time.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${ATTNFLOW_VENV:-$ROOT/.cache/venv}
t0=$(date +%s)
"$VENV/bin/pip" install -q --no-build-isolation --no-deps "$ROOT"
t1=$(date +%s)
cd "$ROOT/python/tests"
HF_HUB_OFFLINE=1 ATTNFLOW_VENV="$VENV" "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" .
t2=$(date +%s)
printf '[run] python package: built in %ss, pytest passed in %ss\n' $((t1 - t0)) $((t2 - t1)) >&2
