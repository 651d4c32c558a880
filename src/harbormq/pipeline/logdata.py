"""Where a job's records come from: a log (the data source) or a log lake."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..log.records import EXTENT_HEADER_SIZE
from .extents import plan_extents
from .source import FORMAT


@dataclass
class LogInput:
    """``log``: log/archive directories or globs; ``lake``: a lake made by ``ingest``."""
    log: str | None = None
    lake: str | None = None
    qm_name: str | None = None

    def __post_init__(self):
        if (self.log is None) == (self.lake is None):
            raise ConfigError("give exactly one of --log and --lake", msgid="HMQ7602E")

    def records(self, spark, *, include_body: bool = False, columns: list[str] | None = None,
                extents: list[int] | None = None):
        """Records as a DataFrame with the data source's schema (or ``columns`` of
        it), optionally only those of the extents starting at ``extents``."""
        import json
        if self.log is not None:
            reader = spark.read.format(FORMAT).option("includeBody", str(include_body).lower())
            if self.qm_name:
                reader = reader.option("qmName", self.qm_name)
            if columns:
                reader = reader.option("columns", ",".join(columns))
            if extents is not None:
                reader = reader.option("extents", json.dumps(sorted(extents)))
            return reader.load(self.log)
        from pyspark.sql import functions as F

        from .ingest import Lake
        df = Lake(self.lake).records(spark, need_bodies=include_body)
        if extents is not None:
            first = F.col("lsn") - F.col("offset") + F.lit(EXTENT_HEADER_SIZE)
            df = df.filter(first.isin(list(extents)))
        df = df if include_body else df.drop("body")
        return df.select(*columns) if columns else df

    def extent_bounds(self, records) -> tuple[list[int], dict[int, int]]:
        """(first LSNs ascending, first LSN -> end LSN of closed extents), for
        telling unbroken history from a gap. ``records``: this input's records
        (the EXTENT_END rows are read from them)."""
        if self.lake is not None:
            from .ingest import Lake
            return Lake(self.lake).extent_bounds()
        plans = plan_extents(self.log)
        if self.qm_name:
            plans = [p for p in plans if p.qm_name == self.qm_name]
        firsts = [p.first_lsn for p in plans]
        ends = {}
        for r in (records.filter("type = 'EXTENT_END'")
                  .select("lsn", "length").collect()):
            first = max(f for f in firsts if f <= r["lsn"])
            ends[first] = r["lsn"] + r["length"]
        return firsts, ends
