#!/usr/bin/env bash
# The main job: an end-to-end tour on an embedded default queue manager.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
exec .venv/bin/harbormq tour "$@"
