"""Builds the hot modules with mypyc as part of `pip install` (pyproject.toml holds the rest).

The modules are the ones `harbormq._compiled.COMPILED_MODULES` lists. The C that
mypyc writes goes to .cache/mypyc (not build/), and the extensions land beside
their sources in src/ on an editable install. After a build, the digests of the
sources compiled are written beside them (`_compiled_sources.json`), with the
compiled modules each imports: the import hook loads a module's source when
its digest, or that of a compiled module it imports, no longer matches, and
scripts/setup-venv.sh rebuilds. `HARBORMQ_PURE_PYTHON=1` at install time builds
no extension at all.
"""

import hashlib
import json
import os
import runpy
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
COMPILED = runpy.run_path(str(ROOT / "src" / "harbormq" / "_compiled.py"))
MODULES = COMPILED["COMPILED_MODULES"]
SOURCES_FILE = COMPILED["SOURCES_FILE"]


def module_source(module: str) -> Path:
    return ROOT / "src" / Path(*module.split(".")).with_suffix(".py")


class BuildAndRecordSources(build_ext):
    """build_ext that then records which sources the extensions were built from."""

    def run(self):
        super().run()
        digests = {m: hashlib.sha256(module_source(m).read_bytes()).hexdigest()
                   for m in MODULES}
        # a compiled module loads the extensions of those it imports: it is
        # current only while they are (harbormq._compiled.current_builds)
        imports = {m: COMPILED["compiled_imports"](m, module_source(m).read_text())
                   for m in MODULES}
        in_place = self.inplace or getattr(self, "editable_mode", False)
        package_dir = ROOT / "src" / "harbormq" if in_place else \
            Path(self.build_lib) / "harbormq"
        package_dir.mkdir(parents=True, exist_ok=True)
        (package_dir / SOURCES_FILE).write_text(
            json.dumps({"modules": digests, "imports": imports}, indent=1, sort_keys=True)
            + "\n")


def metadata_only() -> bool:
    """pip asks for the metadata in a run of its own (egg_info, dist_info): no
    need to type-check and generate the C there too."""
    args = set(sys.argv[1:])
    return bool(args & {"egg_info", "dist_info"}) and not args & {
        "build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


def compiled_extensions():
    if os.environ.get(COMPILED["PURE_PYTHON_ENV"], "") not in ("", "0") or metadata_only():
        return []
    from mypyc.build import mypycify

    return mypycify(
        [str(module_source(m).relative_to(ROOT)) for m in MODULES]
        # type-check what the modules import, report nothing about it
        + ["--follow-imports=silent", "--ignore-missing-imports"],
        opt_level="3",
        # relative: setuptools refuses absolute source paths (the build runs in ROOT)
        target_dir=os.path.join(".cache", "mypyc"),
        # one shared library inside the package, not a hashed name at src/'s top
        group_name="harbormq._hot",
    )


setup(ext_modules=compiled_extensions(), cmdclass={"build_ext": BuildAndRecordSources})
