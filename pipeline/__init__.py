"""binlogd on Spark: the "binlog" data source and the index/changes jobs (see pipeline/README.md).

The data source class lives in :mod:`pipeline.source` (import it as
``pipeline.source.BinlogDataSource``: executors import it by that name). Importing this
package does not import pyspark.
"""

from __future__ import annotations


def register(spark) -> None:
    """Register the "binlog" data source with ``spark`` (``spark.read.format("binlog")``)."""
    from .source import BinlogDataSource

    spark.dataSource.register(BinlogDataSource)
