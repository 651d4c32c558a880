"""The log pipeline on Spark (docs/pipeline.md).

* ``source``: the ``harbormq-log`` data source (one row per log record)
* ``algebra``: point-in-time queue contents as set algebra (pure, no Spark)
* ``rebuild``, ``ingest``, ``report``, ``trace``, ``chanreport`` (``channels``): the jobs;
  ``chanlog``: channel batches in a log; ``cli``: their commands
* ``loadfile``: the load file format and ``load_file_into``

Importing this package does not import pyspark; the jobs do.
"""

from __future__ import annotations


def register(spark) -> None:
    """Register the ``harbormq-log`` data source with a SparkSession."""
    from .source import HarbormqLogDataSource
    spark.dataSource.register(HarbormqLogDataSource)
