"""The ``ingest`` job and the log lake it builds.

Lake layout::

    LAKE/records/day=YYYY-MM-DD/type=MSG_PUT/part-….parquet   the records (no bodies
                                                              unless --with-bodies)
    LAKE/_manifest.json                                       what the lake holds

The manifest lists, per extent (identified by its first LSN, since circular
extent numbers are reused), the LSN range ingested [first_lsn, ingested_lsn),
whether the extent is closed (its EXTENT_END is in the lake) and the ingest
batches whose files count. Every row carries its ``batch``; readers keep only
batches the manifest lists, so an ingest that dies after writing files but
before its manifest leaves nothing visible, and the rerun writes the range
again under a new batch: re-running never duplicates a record.

Incremental: an extent already closed in the lake is skipped; one ingested
while it was active resumes at its ``ingested_lsn`` (a record boundary) through
the data source's ``resume`` option, so only its new tail is read.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from ..errors import ConfigError, HarbormqError
from ..fsutil import atomic_write, make_dirs
from ..log.records import EXTENT_HEADER_SIZE
from .extents import plan_extents
from .session import Progress
from .source import FORMAT

MANIFEST = "_manifest.json"
LAKE_VERSION = 1


class LakeError(HarbormqError):
    msgid = "HMQ7630E"


class Lake:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.records_dir = self.root / "records"
        self.manifest_path = self.root / MANIFEST

    def manifest(self) -> dict:
        if not self.manifest_path.exists():
            return {"version": LAKE_VERSION, "qm_name": None, "extents": {}, "batches": []}
        m = json.loads(self.manifest_path.read_text())
        if m.get("version") != LAKE_VERSION:
            raise LakeError(f"{self.manifest_path} is lake version {m.get('version')}; this "
                            f"harbormq reads version {LAKE_VERSION}", path=str(self.root))
        return m

    def save_manifest(self, m: dict) -> None:
        atomic_write(self.manifest_path, (json.dumps(m, indent=1, sort_keys=True) + "\n")
                     .encode())

    def records(self, spark, *, need_bodies: bool = False):
        """The lake's records (committed batches only), with the data source's columns."""
        m = self.manifest()
        if need_bodies and not m.get("with_bodies"):
            raise LakeError(f"the lake {self.root} holds no message bodies, which this job "
                            "needs", hint="rebuild from --log, or ingest with --with-bodies",
                            path=str(self.root))
        if not m["batches"]:
            raise LakeError(f"the lake {self.root} holds no records yet",
                            hint="run 'harbormq pipeline ingest' first", path=str(self.root))
        df = spark.read.parquet(str(self.records_dir))
        df = df.filter(df.batch.isin(m["batches"]))
        for lo, hi in m.get("given_up", []):
            # rows ingested before a conditional restart gave their LSNs up
            df = df.filter((df.lsn < lo) | (df.lsn >= hi))
        return df.drop("batch", "day")

    def extent_bounds(self) -> tuple[list[int], dict[int, int]]:
        ext = self.manifest()["extents"]
        firsts = sorted(int(k) for k in ext)
        if not firsts:
            raise LakeError(f"the lake {self.root} holds no extents", path=str(self.root))
        ends = {int(k): v["ingested_lsn"] for k, v in ext.items() if v["closed"]}
        return firsts, ends


def run_ingest(spark, log: str, lake_dir: str, *, qm_name: str | None = None,
               with_bodies: bool = False, progress: Progress | None = None) -> dict:
    """Append what the lake does not hold yet; returns what this run added."""
    from pyspark.sql import functions as F

    progress = progress or Progress("ingest", 4)
    lake = Lake(lake_dir)
    make_dirs(lake.root, mode=0o755)
    m = lake.manifest()
    plans = plan_extents(log)
    names = {p.qm_name for p in plans}
    qm = qm_name or m["qm_name"] or (names.pop() if len(names) == 1 else None)
    if qm is None:
        raise ConfigError(f"the extents under {log} belong to several queue managers",
                          hint="choose one with --qm", msgid="HMQ7603E")
    if m["qm_name"] not in (None, qm):
        raise LakeError(f"the lake {lake.root} holds the log of queue manager {m['qm_name']}, "
                        f"not {qm}", path=str(lake.root))
    if m.get("with_bodies", with_bodies) != with_bodies:
        raise LakeError(f"the lake {lake.root} was ingested "
                        f"{'with' if m['with_bodies'] else 'without'} message bodies; "
                        "keep --with-bodies the same for every ingest", path=str(lake.root))
    plans = [p for p in plans if p.qm_name == qm]
    given_up = [list(p.given_up) for p in plans if p.given_up]
    new_cuts = [g for g in given_up if g not in m.get("given_up", [])]
    if new_cuts:       # recorded at once: the rows already in the lake are filtered
        m["given_up"] = m.get("given_up", []) + new_cuts
        lake.save_manifest(m)
    todo, resume = [], {}
    for p in plans:
        seen = m["extents"].get(str(p.first_lsn))
        if seen is not None and p.stop_lsn is not None and not seen["closed"] and \
                seen["ingested_lsn"] >= p.stop_lsn:
            seen["closed"] = True       # a cut extent: nothing more will come from it
            continue
        if seen is None:
            todo.append(p)
        elif not seen["closed"]:
            todo.append(p)
            resume[str(p.first_lsn)] = seen["ingested_lsn"]
    progress.stage(f"planned: {len(todo)} of {len(plans)} extent(s) to read "
                   f"({len(resume)} resumed where the last ingest stopped)")
    if not todo:
        progress.stage("nothing new")
        return {"batch": None, "records": 0, "extents": 0}
    batch = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    df = (spark.read.format(FORMAT).option("qmName", qm)
          .option("includeBody", str(with_bodies).lower())
          .option("resume", json.dumps(resume))
          .option("extents", json.dumps([p.first_lsn for p in todo])).load(log))
    df = (df.withColumn("day", F.date_format("timestamp", "yyyy-MM-dd"))
          .withColumn("batch", F.lit(batch)).cache())
    # what this batch holds per extent: the end LSN reached and whether it is closed
    extents = {r["first"]: r for r in _extent_progress(df)}
    count = sum(r["records"] for r in extents.values())
    progress.stage(f"decoded {count} record(s)")
    if not count:           # the log did not grow: the lake stays exactly as it was
        df.unpersist()
        progress.stage("nothing new")
        return {"batch": None, "records": 0, "extents": len(todo)}
    (df.write.mode("append").partitionBy("day", "type").parquet(str(lake.records_dir)))
    df.unpersist()
    progress.stage(f"wrote batch {batch}")
    for p in todo:
        got = extents.get(p.first_lsn)
        key = str(p.first_lsn)
        entry = m["extents"].get(key, {"extent": p.extent, "first_lsn": p.first_lsn,
                                       "ingested_lsn": p.first_lsn, "closed": False})
        if got is not None:
            entry["ingested_lsn"] = got["end"]
            entry["closed"] = bool(got["closed"]) or \
                (p.stop_lsn is not None and got["end"] >= p.stop_lsn)
        m["extents"][key] = entry
    m["qm_name"] = qm
    m["with_bodies"] = with_bodies
    m["batches"].append(batch)
    lake.save_manifest(m)
    progress.stage(f"manifest updated: {len(m['extents'])} extent(s) in the lake")
    return {"batch": batch, "records": count, "extents": len(todo)}


def _extent_progress(df):
    """Per extent read in this batch (by first LSN = lsn - offset + header size):
    records, the end LSN reached, and whether its EXTENT_END was seen."""
    from pyspark.sql import functions as F
    first = (F.col("lsn") - F.col("offset") + EXTENT_HEADER_SIZE).alias("first")
    per = df.groupBy(first).agg(
        F.count("*").alias("records"), F.max(F.col("lsn") + F.col("length")).alias("end"),
        F.max(F.when(F.col("type") == "EXTENT_END", 1).otherwise(0)).alias("closed"))
    return [r.asDict() for r in per.collect()]
