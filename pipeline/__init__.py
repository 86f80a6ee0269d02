"""binlogd on Spark: the "binlog" data source and the index/changes jobs (see pipeline/README.md).

The data source class lives in :mod:`binlogd.pipeline.source` (import it as
``binlogd.pipeline.source.BinlogDataSource``: executors import it by that name). Importing this
package does not import pyspark.
"""

from __future__ import annotations

if __name__ != "binlogd.pipeline":  # the folder pipeline/ is installed as binlogd.pipeline (pyproject.toml)
    raise ImportError(f"import binlogd.pipeline, not {__name__}: pipeline/ is part of the binlogd namespace")


def register(spark) -> None:
    """Register the "binlog" data source with ``spark`` (``spark.read.format("binlog")``)."""
    from .source import BinlogDataSource

    spark.dataSource.register(BinlogDataSource)
