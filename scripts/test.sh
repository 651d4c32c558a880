#!/usr/bin/env bash
# The test command: installs what it needs, then runs pytest (extra args pass through).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh || exit 1
# --durations: the slowest tests at the end of every run, so a run that grows
# too long says where its time went
.venv/bin/python -m pytest -q --durations=25 "$@"
rc=$?
# pytest exits 5 when a selection collects nothing: an empty selection is not a failure
if [ "$rc" -eq 5 ]; then
  echo "no tests were collected by this selection"
  exit 0
fi
exit "$rc"
