"""The JVM options a local session adds never take the place of the user's own.

Each case starts its own JVM (a child process): JVM options count only at start."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.procs import SRC

from harbormq.pipeline.session import LOCAL_JAVA_OPTIONS

PROBE = """
import json, sys
from harbormq.pipeline.session import session
s = session("probe", sys.argv[1] or None, json.loads(sys.argv[2]))
jvm = s.sparkContext._jvm
args = [str(a) for a in jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
        .getInputArguments()]
print("PROBE " + json.dumps({"args": args,
                             "probe": jvm.java.lang.System.getProperty("harbormq.probe")}))
s.stop()
"""


def jvm_of(tmp_path, conf: dict, defaults: str = "", master: str = "local[1]") -> dict:
    """The started JVM's arguments and its harbormq.probe property, for a session
    made with ``conf`` and a spark-defaults.conf of ``defaults``."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(defaults)
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
    env.update(PYTHONPATH=str(SRC), SPARK_CONF_DIR=str(conf_dir))
    out = subprocess.run([sys.executable, "-c", PROBE, master, json.dumps(conf)], env=env,
                         capture_output=True, text=True, timeout=180)
    line = next((x for x in out.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line, out.stderr[-3000:]
    return json.loads(line[len("PROBE "):])


def test_a_users_java_options_are_kept_and_come_after_ours(tmp_path):
    """spark.driver.extraJavaOptions from spark-defaults.conf (or --conf): the
    user's options all reach the JVM, after ours, so theirs win."""
    jvm = jvm_of(tmp_path, {}, "spark.driver.extraJavaOptions -Dharbormq.probe=mine "
                               "-XX:Tier4InvocationThreshold=7000\n")
    assert jvm["probe"] == "mine"
    args = jvm["args"]
    assert set(LOCAL_JAVA_OPTIONS.split()) <= set(args)
    ours = args.index("-XX:Tier4InvocationThreshold=50000")
    assert ours < args.index("-XX:Tier4InvocationThreshold=7000")   # the later one counts


def test_default_java_options_of_the_user_replace_ours(tmp_path):
    jvm = jvm_of(tmp_path, {}, "spark.driver.defaultJavaOptions=-Dharbormq.probe=admin\n")
    assert jvm["probe"] == "admin"
    assert not set(LOCAL_JAVA_OPTIONS.split()) & set(jvm["args"])
