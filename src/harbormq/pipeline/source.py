"""The ``harbormq-log`` Spark data source (``pyspark.sql.datasource``).

    spark.dataSource.register(HarbormqLogDataSource)      # or pipeline.register(spark)
    df = spark.read.format("harbormq-log").load("/var/harbormq/qmgrs/QM1/log")

Options (all optional):
* ``path``: a log directory, an archive directory, an extent file or a glob;
  several, comma separated. The same extent found twice is read once.
* ``qmName``: read only extents of this queue manager (their header names it);
  required when the files belong to more than one.
* ``includeBody``: "true" to fill the ``body`` columns (off by default).
* ``resume``: JSON object {first LSN of an extent: LSN}: start decoding that
  extent at that LSN, which must be a record boundary (the ingest job passes
  the end LSN it reached last time). Records below it are not returned.
* ``extents``: JSON list of first LSNs: read only these extents (ingest).
* ``columns``: comma-separated column names: return only these (Python data
  sources get no column pruning from Spark; a job that needs few columns
  says so, and the JVM converts only those).

Where each method runs: ``HarbormqLogDataSource.schema`` and ``reader`` and
``HarbormqLogReader.pushFilters`` and ``partitions`` run once per query on the
driver (in a Python worker); ``read`` runs once per partition on an executor.
The reader object must stay picklable: it holds only options, bounds and plans.

Filter pushdown (PySpark 4.1+, ``spark.sql.python.filterPushdown.enabled``,
which ``pipeline.session`` sets): comparisons of ``lsn`` and ``ts_ns`` with
literals and ``object`` = / IN are handled exactly (whole extents are skipped
by their LSN and time bounds, the rest filtered while decoding); comparisons
of ``timestamp`` only skip extents and are returned to Spark to evaluate.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from ..errors import ConfigError
from .extents import ExtentPlan, ScanBounds, plan_extents
from .rows import SCHEMA, SPARK_DDL, read_extent

FORMAT = "harbormq-log"


@dataclass(frozen=True)
class ExtentPartition(InputPartition):
    """One extent to read (an InputPartition; pickled to the executor)."""
    plan: ExtentPlan
    resume_lsn: int | None = None


class HarbormqLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self):
        columns = _columns(self.options)
        if columns is None:
            return SPARK_DDL
        from pyspark.sql.pandas.types import from_arrow_schema
        return from_arrow_schema(pa.schema([SCHEMA.field(c) for c in columns]))

    def reader(self, schema) -> "HarbormqLogReader":
        return HarbormqLogReader(self.options)


def _flag(options, key: str) -> bool:
    value = str(options.get(key, "false")).lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option {key} must be true or false, not {value!r}",
                          msgid="HMQ7602E")
    return value == "true"


def _columns(options) -> list[str] | None:
    text = options.get("columns")
    if not text:
        return None
    columns = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in columns if c not in SCHEMA.names]
    if unknown:
        raise ConfigError(f"option columns names unknown column(s) {', '.join(unknown)}; "
                          f"the columns are {', '.join(SCHEMA.names)}", msgid="HMQ7602E")
    return columns


def _ns(value) -> int | None:
    """A timestamp literal as ns since the epoch, when it names one instant."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return int(value.timestamp()) * 1_000_000_000 + value.microsecond * 1000
    return None


class HarbormqLogReader(DataSourceReader):
    def __init__(self, options):
        path = options.get("path")
        if not path:
            raise ConfigError("the harbormq-log data source needs a path: "
                              "spark.read.format('harbormq-log').load(LOG_DIR) (several: "
                              "comma separated)", msgid="HMQ7602E")
        self.path = path
        self.qm_name = options.get("qmName") or None
        self.include_body = _flag(options, "includeBody")
        try:
            resume = json.loads(options.get("resume") or "{}")
            self.resume = {int(k): int(v) for k, v in resume.items()}
        except (ValueError, AttributeError):
            raise ConfigError(f"option resume must be a JSON object of first LSN -> LSN, not "
                              f"{options.get('resume')!r}", msgid="HMQ7602E") from None
        try:
            only = options.get("extents")
            self.only = None if only is None else {int(x) for x in json.loads(only)}
        except (ValueError, TypeError):
            raise ConfigError(f"option extents must be a JSON list of first LSNs, not "
                              f"{options.get('extents')!r}", msgid="HMQ7602E") from None
        self.columns = _columns(options)
        self.bounds = ScanBounds()
        #: bounds from ``timestamp`` filters: they skip extents, Spark still evaluates them
        self.skip_bounds = ScanBounds()

    # -- driver, once per query ------------------------------------------------------

    def pushFilters(self, filters):
        exact: dict = {}
        skip: dict = {}
        for f in filters:
            # Not, And, Or name no single attribute: Spark evaluates them
            attr = getattr(f, "attribute", None)
            col = attr[0] if attr is not None and len(attr) == 1 else None
            value = getattr(f, "value", None)
            if col in ("lsn", "ts_ns") and isinstance(value, int) and \
                    not isinstance(value, bool) and _narrow(exact, col, f):
                continue
            if col == "object" and isinstance(f, (EqualTo, In)):
                names = {f.value} if isinstance(f, EqualTo) else set(f.value)
                if all(isinstance(n, str) for n in names):
                    prev = exact.get("objects")
                    exact["objects"] = frozenset(names if prev is None else prev & names)
                    continue
            if col == "timestamp" and _ns(value) is not None:
                _narrow(skip, "ts_ns", f, _ns(value))
            yield f          # not handled: Spark evaluates it
        self.bounds = _bounds(exact)
        self.skip_bounds = _bounds(skip)

    def partitions(self):
        plans = plan_extents(self.path)
        names = {p.qm_name for p in plans}
        if self.qm_name is not None:
            plans = [p for p in plans if p.qm_name == self.qm_name]
            if not plans:
                raise ConfigError(f"no extent under {self.path} belongs to queue manager "
                                  f"{self.qm_name} (found: {', '.join(sorted(names))})",
                                  msgid="HMQ7603E")
        elif len(names) > 1:
            raise ConfigError(f"the extents under {self.path} belong to several queue "
                              f"managers ({', '.join(sorted(names))})",
                              hint="choose one with the qmName option", msgid="HMQ7603E")
        kept = [p for p in plans if self.bounds.keeps_extent(p) and
                self.skip_bounds.keeps_extent(p) and
                (self.only is None or p.first_lsn in self.only)]
        # Spark wants at least one partition; an empty one reads nothing
        return [ExtentPartition(p, self.resume.get(p.first_lsn)) for p in kept] or \
            [ExtentPartition(None)]

    # -- executor, once per partition ---------------------------------------------------

    def read(self, partition: ExtentPartition):
        if partition.plan is None:
            return
        yield from read_extent(partition.plan, self.bounds, include_body=self.include_body,
                               resume_lsn=partition.resume_lsn, columns=self.columns)


def _narrow(acc: dict, col: str, f, value: int | None = None) -> bool:
    """Fold comparison ``f`` on ``col`` into inclusive [min, max] bounds."""
    v = f.value if value is None else value
    lo, hi = acc.get(col, (None, None))
    if isinstance(f, EqualTo):
        lo, hi = _max(lo, v), _min(hi, v)
    elif isinstance(f, GreaterThan):
        lo = _max(lo, v + 1)
    elif isinstance(f, GreaterThanOrEqual):
        lo = _max(lo, v)
    elif isinstance(f, LessThan):
        hi = _min(hi, v - 1)
    elif isinstance(f, LessThanOrEqual):
        hi = _min(hi, v)
    else:
        return False
    acc[col] = (lo, hi)
    return True


def _max(a, b):
    return b if a is None else max(a, b)


def _min(a, b):
    return b if a is None else min(a, b)


def _bounds(acc: dict) -> ScanBounds:
    lsn_lo, lsn_hi = acc.get("lsn", (None, None))
    ts_lo, ts_hi = acc.get("ts_ns", (None, None))
    return ScanBounds(lsn_min=lsn_lo, lsn_stop=None if lsn_hi is None else lsn_hi + 1,
                      ts_min=ts_lo, ts_max=ts_hi, objects=acc.get("objects"))
