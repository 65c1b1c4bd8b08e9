"""Compacted topics as tables: aggregates upserted into them exactly once
(:mod:`~spark_connector.tables.upserts`) and a partition's records reduced to the latest
record per key for ``readAs=table`` (:mod:`~spark_connector.tables.latest_per_key`).
"""
