#!/usr/bin/env bash
# Creates .venv (once) and installs harbormq with its dev, spark and qsg extras into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# The install compiles the hot modules with mypyc (setup.py): it needs gcc and
# the Python headers, installed here when missing (a fresh CI machine, as root).
# HARBORMQ_PURE_PYTHON=1 installs without compiling (docs/performance.md).
pure=${HARBORMQ_PURE_PYTHON:-}
if [ -z "$pure" ] || [ "$pure" = 0 ]; then
  headers=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  if ! command -v gcc >/dev/null || [ ! -f "$headers/Python.h" ]; then
    (apt-get update -q && apt-get install -y -q build-essential python3-dev) >/dev/null
  fi
fi
stamp=.venv/.harbormq-installed
# what changes the build: pyproject.toml, setup.py, a compiled module's source
# (the build records the sources it compiled; a stale build is loaded as source)
compiled_check() {
  [ -n "$pure" ] && [ "$pure" != 0 ] && return 0
  PYTHONPATH="$PWD/src" .venv/bin/python -c \
    'import sys, harbormq._compiled as c; sys.exit(c.main(["--check"]))' >/dev/null 2>&1
}
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] \
    || ! compiled_check; then
  .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -m pip install -q -e '.[dev,spark,qsg]' 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import harbormq, lmdb, crc32c, pytest" 
  compiled_check || { echo "the compiled modules did not build (setup.py)" >&2; exit 1; }
  touch "$stamp"
fi
# The install is editable: modules load from src/. Compiled ahead, every
# process (a queue manager start, a CLI command, a test's server or crash
# child) loads bytecode instead of compiling each module: about 0.2 s of CPU
# a process, where PYTHONDONTWRITEBYTECODE keeps Python from caching what it
# compiles. Only modules changed since the last run are compiled again.
.venv/bin/python -m compileall -q src tests/support
