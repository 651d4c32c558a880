"""rebuild and report on a real Spark standalone cluster (one master, one worker,
both on 127.0.0.1, started from the pyspark wheel's scripts), submitted with
spark-submit and --py-files, compared with the local run."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pyspark
import pytest
from support.procs import SRC

from harbormq.pipeline.logdata import LogInput
from harbormq.pipeline.rebuild import run_rebuild
from harbormq.pipeline.report import run_report

SPARK_BIN = Path(pyspark.__file__).parent / "bin"
MAIN = SRC / "harbormq" / "pipeline" / "__main__.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"{path.name}: the process ended ({proc.returncode}):\n"
                                 + path.read_text(errors="replace")[-3000:])
        time.sleep(0.5)
    raise AssertionError(f"{path.name}: no {text!r} within {timeout} s:\n"
                         + path.read_text(errors="replace")[-3000:])


def stop(proc: subprocess.Popen) -> None:
    """Stop one process we started, by its PID."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def cluster(tmp_path):
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "logs"),
               SPARK_WORKER_DIR=str(tmp_path / "work"), SPARK_LOCAL_DIRS=str(tmp_path / "tmp"),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    port = free_port()
    procs = []
    try:
        master_log = tmp_path / "master.out"
        master = subprocess.Popen(
            [str(SPARK_BIN / "spark-class"), "org.apache.spark.deploy.master.Master",
             "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
            stdout=open(master_log, "w"), stderr=subprocess.STDOUT, env=env)
        procs.append(master)
        wait_for(master_log, "I have been elected leader", master)
        worker_log = tmp_path / "worker.out"
        worker = subprocess.Popen(
            [str(SPARK_BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker",
             f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--webui-port",
             str(free_port()), "--cores", "1", "--memory", "1g"],
            stdout=open(worker_log, "w"), stderr=subprocess.STDOUT, env=env)
        procs.append(worker)
        wait_for(worker_log, "Successfully registered with master", worker)
        yield f"spark://127.0.0.1:{port}", env
    finally:
        for p in reversed(procs):
            stop(p)


@pytest.mark.cluster
def test_rebuild_and_report_on_a_standalone_cluster(cluster, make_qm, open_qm, tmp_path,
                                                    spark):
    master, env = cluster
    make_qm("QM1")
    qm = open_qm("QM1")
    qm.define_queue("A", DEFPSIST="YES")
    qm.define_queue("B", DEFPSIST="YES")
    for i in range(60):
        qm.put("A" if i % 3 else "B", b"m%d" % i, priority=i % 10)
    with qm.begin() as u:
        u.get("A")
        u.put("B", b"moved")
    backed = qm.begin()
    backed.get("B")
    backed.backout()
    at = qm._call_sync(lambda: qm.core.log.end_lsn - 1)
    qm.close()
    log = str(qm.config.log_dir)

    package = tmp_path / "harbormq.zip"
    with zipfile.ZipFile(package, "w") as z:
        for f in (SRC / "harbormq").rglob("*.py"):
            z.write(f, f.relative_to(SRC))
    submit = [str(SPARK_BIN / "spark-submit"), "--master", master, "--py-files", str(package),
              "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=1",
              # a one-core test cluster: not the 200 shuffle partitions meant for big ones
              "--conf", "spark.sql.shuffle.partitions=2",
              str(MAIN)]
    for job in (["rebuild", "--log", log, "--at-lsn", str(at), "--out",
                 str(tmp_path / "cluster-rebuild")],
                ["report", "--log", log, "--out", str(tmp_path / "cluster-report")]):
        done = subprocess.run(submit + job, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-4000:]
        assert f"Connecting to master {master}" in done.stderr or master in done.stderr
    local = run_rebuild(spark, LogInput(log=log), at_lsn=at, out=tmp_path / "local-rebuild")
    remote = json.loads((tmp_path / "cluster-rebuild" / "rebuild.json").read_text())
    assert remote == json.loads(json.dumps(local))
    assert remote["queues"]["A"]["messages"] == 39 and remote["queues"]["B"]["messages"] == 21
    for q in ("A", "B"):
        assert (tmp_path / "cluster-rebuild" / f"{q}.hmqload").read_text() == \
            (tmp_path / "local-rebuild" / f"{q}.hmqload").read_text()
    rep_local = run_report(spark, LogInput(log=log).records(spark), tmp_path / "local-report")
    rep_remote = json.loads((tmp_path / "cluster-report" / "report.json").read_text())
    for key in ("records", "first_lsn", "retention"):
        assert rep_remote[key] == json.loads(json.dumps(rep_local[key], default=str))
    assert rep_remote["uows"]["by_outcome"] == rep_local["uows"]["by_outcome"] == {
        "committed": 1, "backed out": 1}
    assert (tmp_path / "cluster-report" / "queue_A.png").stat().st_size > 1000
    shutil.rmtree(tmp_path / "work", ignore_errors=True)
