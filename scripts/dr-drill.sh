#!/usr/bin/env bash
# The disaster-recovery drill (docs/standby.md): a primary under STOMP load
# archives its log, a standby follows it by replay, the primary's home is
# destroyed, the standby is activated; prints RPO, RTO and the standby's lag
# as JSON and exits non-zero if any receipted, archived message is lost.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh >/dev/null
exec .venv/bin/python benchmarks/bench_standby.py "$@"
