#!/usr/bin/env bash
# The test command: installs what it needs, then runs pytest (extra args pass through).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh || exit 1
# --durations: the slowest tests at the end of every run, so a run that grows
# too long says where its time went
.venv/bin/python -m pytest -q --durations=25 "$@"
rc=$?
# CI (a full run, no arguments) also runs a representative part on the Python
# sources of the compiled modules (docs/performance.md): the frame parser, the
# queue, the record codec, the STOMP message codec, STOMP sends end to end, a
# kill -9 and restart
if [ "$rc" -eq 0 ] && [ "$#" -eq 0 ]; then
  echo "the same on the pure-Python fallback (HARBORMQ_PURE_PYTHON=1):"
  HARBORMQ_PURE_PYTHON=1 .venv/bin/python -m pytest -q \
    tests/test_compiled.py tests/stomp/test_stomp_frames.py tests/core/test_queue_memory.py \
    tests/log/test_codec.py tests/stomp/test_stomp_send.py tests/stomp/test_message_codec.py \
    "tests/stomp/test_stomp_durability.py::test_receipted_persistent_messages_survive_sigkill"
  rc=$?
fi
# pytest exits 5 when a selection collects nothing: an empty selection is not a failure
if [ "$rc" -eq 5 ]; then
  echo "no tests were collected by this selection"
  exit 0
fi
exit "$rc"
