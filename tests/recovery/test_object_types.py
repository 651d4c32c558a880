"""Alias and model queues, dynamic queues, processes and namelists as full
citizens of recovery (docs/objects.md): for each type a media image
(``image --type qalias|qmodel|process|namelist|qlocal``, generic names),
the catalog holding them damaged and recreated, a permanent dynamic queue's
store damaged and recreated, ``dump-config`` replayed into an empty queue
manager, and a backup restored on another home."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.oplog import operator_log
from support.procs import child_env, hmq

from harbormq import QueueManager
from harbormq.admin.commands import run_mqsc
from harbormq.config import QMConfig
from harbormq.errors import UnknownObject
from harbormq.unload.definitions import definitions, dump_config

SETUP = """DEFINE QLOCAL(APP.TARGET) DEFPSIST(YES)
DEFINE QLOCAL(APP.INITQ)
DEFINE PROCESS(APP.PROC) APPLICID('/usr/bin/env') USERDATA('u d') ENVRDATA('e')
DEFINE NAMELIST(APP.NAMES) NAMES(APP.TARGET, 'app.lower') DESCR('the app''s queues')
DEFINE QALIAS(APP.ALIAS) TARGET(APP.TARGET) DEFPRTY(6) GET(DISABLED)
DEFINE QMODEL(APP.MODEL) DEFTYPE(PERMDYN) MAXDEPTH(50) DESCR('replies')
DEFINE QLOCAL(APP.TRIGGERED) TRIGGER TRIGTYPE(DEPTH) TRIGDPTH(3) INITQ(APP.INITQ) +
       PROCESS(APP.PROC) TRIGDATA('td')"""

#: each kind of --type and the catalog key of the object of that kind SETUP defines
KINDS = {"qalias": "APP.ALIAS", "qmodel": "APP.MODEL", "process": "PROCESS:APP.PROC",
         "namelist": "NAMELIST:APP.NAMES", "qlocal": "APP.TARGET"}


def mqsc(qm: QueueManager, text: str) -> str:
    out = qm._call(run_mqsc(qm.core, text, security=None))
    assert out["errors"] == 0, out["output"]
    return out["output"]


def comparable(config: QMConfig) -> dict:
    return {n: (d["type"], d["attrs"]) for n, d in definitions(config).items()}


@pytest.fixture
def app_qm(make_qm, open_qm):
    make_qm(log_type="linear")
    qm = open_qm()
    mqsc(qm, SETUP)
    return qm


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_image_of_each_kind_by_type_and_generic_name(app_qm, home, kind):
    qm = app_qm
    images = qm.image(kind, "APP.*")
    imaged = {r["object"] for r in images}
    if kind == "qlocal":
        assert imaged == {"APP.TARGET", "APP.INITQ", "APP.TRIGGERED"}
    else:
        assert imaged == {KINDS[kind].split(":")[-1]}      # (the key without its type)
    assert all(r["image_lsn"] > 0 for r in images)
    with pytest.raises(UnknownObject, match=f"no {kind} matches 'NOPE.*'"):
        qm.image(kind, "NOPE.*")
    # the media point of the image is where recovery of the object would start
    by_name = {r["object"]: r["image_lsn"] for r in images}
    assert qm.core.media_points[KINDS[kind]]["image_lsn"] == \
        by_name[KINDS[kind].split(":")[-1]]


def test_definitions_come_back_with_a_recreated_catalog(app_qm, open_qm, home):
    qm = app_qm
    qm.image("all")
    # a definition's own recreate says where it is kept
    assert qm.recreate("qalias", "APP.ALIAS") == [{"object": "APP.ALIAS", "definition": True}]
    mqsc(qm, "ALTER QALIAS(APP.ALIAS) DEFPRTY(2)\nALTER NAMELIST(APP.NAMES) NAMES(X)")
    before = {n: d["attrs"] for n, d in qm.core.objects.items()}
    qm.close()
    shutil.rmtree(home / "qmgrs" / "QM1" / "qmgr")        # the catalog is lost
    qm = open_qm()
    assert any(m == "HMQ7474I" and "QMGR" in t for m, t in operator_log(home))
    assert {n: d["attrs"] for n, d in qm.core.objects.items()} == before
    assert qm.core.objects["APP.ALIAS"]["attrs"]["DEFPRTY"] == 2
    assert qm.core.objects["NAMELIST:APP.NAMES"]["attrs"]["NAMES"] == ["X"]


def test_permanent_dynamic_queue_damaged_and_recreated(app_qm, home):
    qm = app_qm
    name = qm.open_model("APP.MODEL", "APP.DYN.*")
    assert name.startswith("APP.DYN.") and len(name) == len("APP.DYN.") + 15
    for i in range(20):
        qm.put(name, b"m%02d" % i, persistent=True)
    qm.image("qlocal", name)
    qm.put(name, b"after the image", persistent=True)
    qm.checkpoint()
    store = home / "qmgrs" / "QM1" / "queues" / name
    shutil.rmtree(store)
    qm.core.queues[name].store.on_damage("its store was removed (test)")
    qm.recreate("qlocal", name)
    assert [m.body for m in qm.browse(name)] == [b"m%02d" % i for i in range(20)] + \
        [b"after the image"]
    assert qm.core.objects[name]["attrs"]["DEFTYPE"] == "PERMDYN"
    assert qm.core.objects[name]["attrs"]["MAXDEPTH"] == 50
    # a permanent dynamic queue survives a restart; closing it without delete keeps it
    assert qm.close_queue(name) is False and name in qm.queue_names()


def test_dump_config_round_trip_of_every_type(app_qm, home, tmp_path, monkeypatch):
    qm = app_qm
    temporary = qm.open_model()                 # not in the script: a restart deletes it
    permanent = qm.open_model("APP.MODEL")      # in it, as a local queue
    config = QMConfig.load("QM1", home)
    qm.close("immediate")          # (the temporary queue left for the restart to delete)
    assert temporary in definitions(config)
    script = dump_config(config)
    assert temporary not in script and f"DEFINE QLOCAL('{permanent}')" in script
    assert "NAMES('APP.TARGET', 'app.lower')" in script
    assert "DEFINE QALIAS('APP.ALIAS')" in script and "DEFINE QMODEL('APP.MODEL')" in script
    home2 = tmp_path / "home2"
    home2.mkdir()
    monkeypatch.setenv("HARBORMQ_HOME", str(home2))
    from harbormq.qmgr import lifecycle
    lifecycle.create("QM1", home=home2, log_file_pages=64)
    with QueueManager.open("QM1", home=home2) as qm2:
        mqsc(qm2, script)
    a = comparable(config)
    b = comparable(QMConfig.load("QM1", home2))
    a.pop(temporary)
    a[permanent][1]["DEFTYPE"] = "PREDEFINED"   # replayed as a plain local queue
    assert a == b


def test_backup_and_restore_keep_every_type(app_qm, home, tmp_path):
    qm = app_qm
    qm.put("APP.ALIAS", b"through the alias", persistent=True)
    permanent = qm.open_model("APP.MODEL")
    qm.put(permanent, b"on the dynamic queue", persistent=True)
    qm.close()
    before = comparable(QMConfig.load("QM1", home))
    assert {"APP.ALIAS", "APP.MODEL", "PROCESS:APP.PROC", "NAMELIST:APP.NAMES",
            permanent} <= set(before)
    bk = tmp_path / "bk"
    res = json.loads(hmq(child_env(home), "backup", "QM1", "--to", str(bk), "--json").stdout)
    shutil.rmtree(home)
    home2 = tmp_path / "home2"
    home2.mkdir()
    hmq(child_env(home2), "restore", "QM1", "--from", str(Path(res["path"])), "--port", "0")
    assert comparable(QMConfig.load("QM1", home2)) == before
    with QueueManager.open("QM1", home=home2) as qm2:
        m = qm2.get("APP.TARGET")
        assert m.body == b"through the alias" and m.priority == 6 and m.persistent
        assert [x.body for x in qm2.browse(permanent)] == [b"on the dynamic queue"]
