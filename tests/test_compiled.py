"""The compiled hot modules: a normal run loads the extensions that setup.py built,
HARBORMQ_PURE_PYTHON=1 loads the .py sources in every process, and a build older
than its source is never what runs (harbormq/_compiled.py, docs/performance.md).

Each case starts a fresh interpreter: which file a module comes from is decided
once per process, at its first import."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harbormq import _compiled

SRC = Path(_compiled.__file__).resolve().parent.parent

REPORT = "import json, harbormq._compiled as c; c.main([])"


def _loaded(env_extra: dict, src: Path = SRC) -> dict:
    env = {k: v for k, v in os.environ.items() if k != _compiled.PURE_PYTHON_ENV}
    env.update(env_extra)
    env["PYTHONPATH"] = str(src)
    out = subprocess.run([sys.executable, "-c", REPORT], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def test_a_normal_run_loads_every_compiled_module_as_built():
    if _compiled.pure_python_requested():
        pytest.skip("this run asked for the Python sources (HARBORMQ_PURE_PYTHON)")
    report = _loaded({})
    assert report["build"] == {m: "built" for m in _compiled.COMPILED_MODULES}, (
        "the compiled modules are missing or older than their source: "
        "run scripts/setup-venv.sh (it rebuilds them)")
    assert report["loaded"] == {m: "compiled" for m in _compiled.COMPILED_MODULES}


def test_the_switch_loads_the_python_source_of_every_compiled_module():
    report = _loaded({_compiled.PURE_PYTHON_ENV: "1"})
    assert report["pure_python_requested"] is True
    assert report["loaded"] == {m: "source" for m in _compiled.COMPILED_MODULES}


def test_the_switch_reaches_the_processes_a_process_starts():
    """A server or crash child inherits the environment, and so the switch."""
    code = ("import subprocess, sys; print(subprocess.run([sys.executable, '-c', "
            f"{REPORT!r}], capture_output=True, text=True, check=True).stdout)")
    env = {k: v for k, v in os.environ.items() if k != _compiled.PURE_PYTHON_ENV}
    env.update({_compiled.PURE_PYTHON_ENV: "1", "PYTHONPATH": str(SRC)})
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True).stdout
    assert json.loads(out)["loaded"] == {m: "source" for m in _compiled.COMPILED_MODULES}


def test_a_build_older_than_its_source_is_not_loaded(tmp_path):
    """An edited source beside an old extension: the hook loads the source and
    the build check reports it stale (scripts/setup-venv.sh then rebuilds)."""
    if not all(_compiled.extension_path(m) for m in _compiled.COMPILED_MODULES):
        pytest.skip("no compiled build here (HARBORMQ_PURE_PYTHON install)")
    copy = tmp_path / "src"
    shutil.copytree(SRC / "harbormq", copy / "harbormq",
                    ignore=shutil.ignore_patterns("__pycache__"))
    edited = _compiled.COMPILED_MODULES[0]
    # a compiled module that imports the edited one would load its old extension
    # (one group): it runs as source too
    importers = [m for m in _compiled.COMPILED_MODULES[1:]
                 if edited in _compiled.compiled_imports(m, _compiled.source_path(m).read_text())]
    untouched = [m for m in _compiled.COMPILED_MODULES[1:] if m not in importers]
    source = _compiled.source_path(edited, copy / "harbormq")
    source.write_text(source.read_text() + "\nEDITED_AFTER_THE_BUILD = True\n")
    report = _loaded({}, src=copy)
    assert report["build"][edited] == "stale"
    assert report["loaded"][edited] == "source"
    assert untouched and all(report["loaded"][m] == "compiled" for m in untouched)
    assert all(report["build"][m] == "stale" and report["loaded"][m] == "source"
               for m in importers)
    check = subprocess.run(
        [sys.executable, "-c",
         "import sys, harbormq._compiled as c; sys.exit(c.main(['--check']))"],
        env={**os.environ, "PYTHONPATH": str(copy)}, capture_output=True, text=True)
    assert check.returncode == 1 and '"stale"' in check.stdout


def test_every_compiled_module_has_its_source_beside_it():
    """The .py stays the one source (and the fallback): never compiled away."""
    for module in _compiled.COMPILED_MODULES:
        assert _compiled.source_path(module).is_file(), module


#: a script that prints what message_codec makes of a spread of SENDs and
#: messages: the MESSAGE bytes, the fields read, and each refusal's text
_CODEC_CASES = r"""
import json
from harbormq import _compiled
from harbormq.log.records import Message
from harbormq.stomp.message_codec import message_frame, message_of_send
from harbormq.errors import HarbormqError

def defaults(where, priority, persistent):
    return (5 if priority is None else priority, True if persistent is None else persistent)

out = {"loaded": _compiled.loaded_state()["harbormq.stomp.message_codec"], "cases": []}
sends = [{}, {"priority": "0", "persistent": "false", "expires": "0"},
         {"priority": "9", "persistent": "True", "expires": "12", "x-y": "a:b\nc"},
         {"priority": "x"}, {"priority": "-1"}, {"persistent": "1"}, {"expires": "1e3"},
         {"correlation-id": "\u00e9t\u00e9", "reply-to": "/queue/R", "content-type": ""}]
for h in sends:
    h = {"destination": "/queue/Q", **h}
    try:
        m = message_of_send(h, b"b", defaults, None)
        case = [m.priority, m.persistent, m.expiry_ns, m.correl_id.hex(), m.reply_to,
                m.format, m.properties]
    except HarbormqError as exc:
        case = ["refused", type(exc).__name__, exc.message]
    out["cases"].append(case)
# bodies that are buffers, and defaults that answer other types than int and bool:
# the build takes them as the source does (as what was given, the body as bytes)
odd_defaults = [lambda where, priority, persistent: ("5", True),
                lambda where, priority, persistent: (5, 1)]
for body, fill in ((bytearray(b"ba"), defaults), (memoryview(b"mv"), defaults),
                   (memoryview(b"xmvx")[1:3], odd_defaults[0]), (b"b", odd_defaults[1])):
    m = message_of_send({"destination": "/queue/Q"}, body, fill, None)
    out["cases"].append([type(m.body).__name__, m.body.hex(), repr(m.priority),
                         repr(m.persistent)])
for body in (bytearray(b"ba\0"), memoryview(b"mv"), memoryview(b"xmvx")[1:3],
             memoryview(b"\1\0\2\0").cast("H")):
    m = Message(body, msg_id=b"\1" * 24, persistent=1, priority=4)
    out["cases"].append(message_frame("MESSAGE\n", "id", None, m, "1.2", None).hex())
props = [{}, {"k": "v\r\n:\\"}, {"a:b": 1, "content-length": "9", "MQTopicString": "t"}]
for version in ("1.0", "1.1", "1.2"):
    for i, p in enumerate(props):
        m = Message(b"\0" * i, msg_id=bytes([i]) * 24, correl_id=b"\xff:" * i, priority=i,
                    persistent=bool(i % 2), expiry_ns=i * 3_000_001, put_time_ns=i * 7_000_003,
                    backout_count=i, reply_to="r:" * i, format="f\n" * i, properties=p)
        for ack, topic in ((None, None), ("c-1", ["destination:", "/topic/t", "\n"])):
            out["cases"].append(message_frame("MESSAGE\n", "id", ack, m, version,
                                              topic).hex())
print(json.dumps(out))
"""


def test_the_compiled_message_codec_and_its_source_give_the_same_answers():
    """The fallback behaves as the build: the same MESSAGE bytes, the same
    fields read from a SEND, the same refusals."""
    if not _compiled.extension_path("harbormq.stomp.message_codec"):
        pytest.skip("no compiled build here (HARBORMQ_PURE_PYTHON install)")
    answers = {}
    for switch in ("0", "1"):
        env = {**os.environ, _compiled.PURE_PYTHON_ENV: switch, "PYTHONPATH": str(SRC)}
        out = subprocess.run([sys.executable, "-c", _CODEC_CASES], env=env, check=True,
                             capture_output=True, text=True).stdout
        answers[switch] = json.loads(out)
    assert answers["0"]["loaded"] == "compiled" and answers["1"]["loaded"] == "source"
    assert answers["0"]["cases"] == answers["1"]["cases"]
    assert len(answers["0"]["cases"]) == 8 + 4 + 4 + 18
    frames = answers["0"]["cases"][12:16]       # the buffers' MESSAGE frames
    assert [bytes.fromhex(f).split(b"\n\n", 1)[1] for f in frames] == \
        [b"ba\0\0", b"mv\0", b"mv\0", b"\1\0\2\0\0"]
    assert all(b"content-length:%d\n" % n in bytes.fromhex(f)
               for n, f in zip((3, 2, 2, 4), frames, strict=True))
