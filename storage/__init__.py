"""The trajectory lake: Parquet shards on local disk or S3, DuckDB views, the
checkpoint registry.

Owns: Arrow schemas, atomic writes, shard layout, queries, weight-version records.
Does not own: what a trajectory means (engines) or when it is written (tasks, flows).
Imports only pyarrow, duckdb, fsspec and s3fs (with botocore, s3fs's client, for its retry
settings and error types).
"""
