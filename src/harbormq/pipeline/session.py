"""The SparkSession every pipeline job uses, and progress lines for long jobs."""

from __future__ import annotations

import os
import re
import sys
import time

#: shuffle partitions for local masters (the default 200 is for clusters)
LOCAL_SHUFFLE_PARTITIONS = 8
#: JVM options of a local master's driver (which is its executor too). A job
#: runs minutes, and on two cores the C2 compiler took a third of the JVM's CPU
#: in a 2M-record rebuild; ten times its thresholds keep C2 for the truly hot
#: methods (C2 26 s instead of 43 s, the JVM 106 s instead of 119 s).
#: (-XX:TieredStopAtLevel=1, no C2 at all, made the decode stage 3x slower.)
LOCAL_JAVA_OPTIONS = ("-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
                      "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000")


def session(app: str, master: str | None = None, conf: dict | None = None):
    """A SparkSession with the harbormq-log data source registered.

    ``master``: None keeps what spark-submit or SPARK_* settings chose, else
    ``local[*]``. Python workers run this interpreter (PYSPARK_PYTHON and
    PYSPARK_DRIVER_PYTHON = sys.executable), so they import the same harbormq."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from .source import HarbormqLogDataSource

    builder = SparkSession.builder.appName(f"harbormq-{app}")
    # under spark-submit the JVM started us and chose the master already
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    chosen = master or (None if submitted else "local[*]")
    if chosen:
        builder = builder.master(chosen)
    builder = (builder.config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")   # Progress lines instead
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.sql.session.timeZone", "UTC"))
    if not submitted:
        # executors started from here run this interpreter too; under spark-submit
        # the cluster's own setting (--conf spark.pyspark.python) is kept
        builder = (builder.config("spark.pyspark.python", sys.executable)
                   .config("spark.pyspark.driver.python", sys.executable))
    if (chosen or "").startswith("local"):
        builder = builder.config("spark.sql.shuffle.partitions", str(LOCAL_SHUFFLE_PARTITIONS))
        # a job's cache lives for one run on few cores: compressing it (statistics
        # and dictionary encoding of every column of every row) showed in the
        # rebuild's profile (docs/performance.md), and the cache fits uncompressed
        builder = builder.config("spark.sql.inMemoryColumnarStorage.compressed", "false")
        if not submitted and not _java_options_given(conf or {}):
            # the JVM is not started yet, so its options still count. As the
            # default options Spark puts before spark.driver.extraJavaOptions: a
            # user's own (--conf, spark-defaults.conf) are kept, and win
            builder = builder.config(_DEFAULT_JAVA_OPTIONS, LOCAL_JAVA_OPTIONS)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(HarbormqLogDataSource)
    return spark


_DEFAULT_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"


def _java_options_given(conf: dict) -> bool:
    """Whether the user set the driver's default JVM options themselves (in
    ``conf``, spark-submit arguments or spark-defaults.conf), which
    LOCAL_JAVA_OPTIONS must then not replace."""
    if _DEFAULT_JAVA_OPTIONS in conf:
        return True
    args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    if _DEFAULT_JAVA_OPTIONS in args or "--properties-file" in args:
        return True
    import pyspark
    # where spark-submit looks: SPARK_CONF_DIR, else SPARK_HOME/conf (a pip
    # install's SPARK_HOME is the pyspark package)
    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(home, "conf")
    try:
        with open(os.path.join(conf_dir, "spark-defaults.conf"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    # a Java properties file: "key value", "key=value" or "key:value"
    return any(re.split(r"[\s=:]", line.strip(), maxsplit=1)[0] == _DEFAULT_JAVA_OPTIONS
               for line in lines)


class Progress:
    """Per-stage progress lines on stderr: '[harbormq rebuild] 2/5 decode ... 3.1 s'."""

    def __init__(self, job: str, stages: int, out=None):
        self.job = job
        self.stages = stages
        self.done = 0
        self.out = out or sys.stderr
        self.t0 = self.t = time.monotonic()

    def stage(self, what: str) -> None:
        now = time.monotonic()
        self.done += 1
        print(f"[harbormq {self.job}] {self.done}/{self.stages} {what} "
              f"(+{now - self.t:.1f} s, {now - self.t0:.1f} s total)", file=self.out, flush=True)
        self.t = now
