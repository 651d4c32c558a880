"""The modules compiled ahead with mypyc, and the switch back to their Python source.

Holds the list of compiled modules (setup.py reads it when `pip install` builds
them), the record of the sources they were built from (`_compiled_sources.json`,
written by the build beside the extensions), the import hook that loads a
module's `.py` source instead of its extension, and a report of what a process
loaded. The hook loads the source when `HARBORMQ_PURE_PYTHON=1` is set (every
process a test or a server starts inherits it) and when the extension was built
from another version of the source, so that a stale build never shadows an
edited file. It builds nothing itself (setup.py does) and imports no layer.

    python -c 'import harbormq._compiled as c; c.main([])'   # what loads, as JSON
    python -c 'import harbormq._compiled as c, sys; sys.exit(c.main(["--check"]))'
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

# The modules the profile named that measured faster compiled (docs/performance.md,
# "Compiled hot modules"; log/records.py measured slower and stays Python).
# setup.py compiles exactly these.
COMPILED_MODULES: tuple[str, ...] = (
    "harbormq.stomp.frames",
    "harbormq.core.queue",
    "harbormq.stomp.message_codec",
)

PURE_PYTHON_ENV = "HARBORMQ_PURE_PYTHON"
SOURCES_FILE = "_compiled_sources.json"
PACKAGE_DIR = Path(__file__).resolve().parent


def pure_python_requested() -> bool:
    """True when the environment asks every harbormq process for the .py sources."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def source_path(module: str, package_dir: Path = PACKAGE_DIR) -> Path:
    """The .py file of a compiled module (module is 'harbormq.a.b')."""
    return package_dir.joinpath(*module.split(".")[1:]).with_suffix(".py")


def extension_path(module: str, package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The built extension of a module beside its source, or None when there is none."""
    source = source_path(module, package_dir)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_suffix(suffix)
        if candidate.exists():
            return candidate
    return None


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compiled_imports(module: str, source: str) -> list[str]:
    """The other compiled modules that ``module``'s source imports (setup.py
    records them with the build). The modules are built as one group: a compiled
    module's import of another compiled module loads that one's extension
    whatever the finders say, so it may run compiled only while that one's
    build is current too."""
    package = module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n in COMPILED_MODULES and n != module)
    return sorted(found)


def _recorded(package_dir: Path) -> dict:
    try:
        return json.loads((package_dir / SOURCES_FILE).read_text())
    except (OSError, ValueError):
        return {}


def built_sources(package_dir: Path = PACKAGE_DIR) -> dict[str, str]:
    """{module: sha256 of the source it was compiled from}, as the last build wrote it."""
    return _recorded(package_dir).get("modules", {})


def current_builds(package_dir: Path = PACKAGE_DIR) -> set[str]:
    """The compiled modules whose extension may run: built from the source as
    it is now, and so is every compiled module it imports (``compiled_imports``,
    as the build recorded them)."""
    recorded = _recorded(package_dir)
    digests = recorded.get("modules", {})
    imports = recorded.get("imports", {})
    own = {m for m in COMPILED_MODULES
           if digests.get(m) is not None and source_path(m, package_dir).exists()
           and digests[m] == source_digest(source_path(m, package_dir))}
    current: set[str] = set()

    def is_current(m: str, seen: frozenset = frozenset()) -> bool:
        if m in current:
            return True
        ok = m in own and all(d in seen or is_current(d, seen | {m})
                              for d in imports.get(m, ()))
        if ok:
            current.add(m)
        return ok

    for m in COMPILED_MODULES:
        is_current(m)
    return current


def build_state(package_dir: Path = PACKAGE_DIR) -> dict[str, str]:
    """{module: 'built' | 'missing' | 'stale'} for the extensions on disk (stale:
    built from another source, or importing a compiled module that is)."""
    recorded = built_sources(package_dir)
    current = current_builds(package_dir)
    state = {}
    for module in COMPILED_MODULES:
        if extension_path(module, package_dir) is None or module not in recorded:
            state[module] = "missing"
        elif module not in current:
            state[module] = "stale"
        else:
            state[module] = "built"
    return state


def loaded_state() -> dict[str, str]:
    """{module: 'compiled' | 'source' | 'not imported'} in this process."""
    state = {}
    for module in COMPILED_MODULES:
        loaded = sys.modules.get(module)
        if loaded is None:
            state[module] = "not imported"
        else:
            compiled = not str(getattr(loaded, "__file__", "")).endswith(".py")
            state[module] = "compiled" if compiled else "source"
    return state


class SourceFallback:
    """A meta path finder that hands out a compiled module's .py source where it must.

    Python prefers an extension over a .py of the same name in one folder; this
    finder comes first and answers only for COMPILED_MODULES: with the source when
    pure Python is asked for or the extension is stale (``current_builds``), else
    it lets the normal finders load the extension.
    """

    def __init__(self, pure_python: bool):
        self.pure_python = pure_python
        self._current: set[str] | None = None

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in COMPILED_MODULES:
            return None
        source = source_path(fullname)
        if not source.exists():
            return None
        if not self.pure_python:
            if self._current is None:
                self._current = current_builds()
            if fullname in self._current:
                return None   # the extension is the build of this very source
        return importlib.util.spec_from_file_location(fullname, source)


def install() -> None:
    """Put the fallback finder first on sys.meta_path (once a process)."""
    if any(isinstance(finder, SourceFallback) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, SourceFallback(pure_python_requested()))


def main(argv: list[str]) -> int:
    state = build_state()
    report = {"pure_python_requested": pure_python_requested(), "build": state}
    if "--check" in argv:
        print(json.dumps(report))
        return 0 if all(s == "built" for s in state.values()) else 1
    for module in COMPILED_MODULES:
        __import__(module)
    report["loaded"] = loaded_state()
    print(json.dumps(report, indent=2))
    return 0
