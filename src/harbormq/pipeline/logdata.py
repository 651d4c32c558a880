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
        lake = Lake(self.lake)
        df = lake.records(spark, need_bodies=include_body)
        if extents is not None:
            # as LSN ranges, which Parquet skips files and row groups by (each
            # ingest task writes one extent's rows of one type: their LSNs are
            # a narrow range); the extent test itself stays, exact
            firsts, _ends = lake.extent_bounds()
            ranges = lsn_ranges(firsts, extents)
            inside = F.lit(False)
            for lo, hi in ranges:
                inside = inside | ((F.col("lsn") >= lo) if hi is None else
                                   F.col("lsn").between(lo, hi - 1))
            first = F.col("lsn") - F.col("offset") + F.lit(EXTENT_HEADER_SIZE)
            df = df.filter(inside).filter(first.isin(list(extents)))
        df = df if include_body else df.drop("body")
        return df.select(*columns) if columns else df

    def point_floor(self, ts_ns: int) -> int | None:
        """An LSN the last record at or before ``ts_ns`` cannot lie below: the
        first LSN of the newest extent whose first record (its time known from
        planning) is at or before ``ts_ns``. That record qualifies, so the point
        is at it or later, whatever the order of times inside extents: finding
        the point decodes no earlier extent. None for a lake (Parquet skips by
        its statistics) or when no extent starts that early."""
        if self.log is None:
            return None
        plans = plan_extents(self.log)
        if self.qm_name:
            plans = [p for p in plans if p.qm_name == self.qm_name]
        return max((p.first_lsn for p in plans
                    if p.first_ts_ns is not None and p.first_ts_ns <= ts_ns), default=None)

    @property
    def rereads_cheaply(self) -> bool:
        """A lake is Parquet: a query that reads it again reads only the columns
        and the type directories it needs, so caching it costs more than it saves."""
        return self.lake is not None

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


def lsn_ranges(firsts: list[int], extents) -> list[tuple[int, int | None]]:
    """The LSN ranges [lo, hi) (hi None: to the end) that the extents starting at
    ``extents`` cover, adjacent ones merged; ``firsts``: every extent's first LSN,
    ascending."""
    wanted = set(extents)
    ranges: list[tuple[int, int | None]] = []
    for i, first in enumerate(firsts):
        if first not in wanted:
            continue
        nxt = firsts[i + 1] if i + 1 < len(firsts) else None
        if ranges and ranges[-1][1] == first:
            ranges[-1] = (ranges[-1][0], nxt)
        else:
            ranges.append((first, nxt))
    return ranges
