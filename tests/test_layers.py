"""The architecture holds (docs/architecture.md): the import-linter contracts
of pyproject.toml (layers import only downward, Spark only in the pipeline),
and no import cycle among harbormq's modules, imports inside functions
included (those under ``if TYPE_CHECKING:`` are for types only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "BROKEN" not in r.stdout and "KEPT" in r.stdout


def import_cycles(package: str) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    edges = {m: {i for i in graph.find_modules_directly_imported_by(m)
                 if i.split(".")[0] == package} for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for m in sorted(edges):
        if m not in index:
            visit(m)
    return cycles


def test_no_import_cycles():
    assert import_cycles("harbormq") == []


def test_the_cycle_check_finds_a_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "cyclic"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclic") == [["cyclic.a", "cyclic.b"]]
