"""Where the lake lives and how hard to try when the store misbehaves."""

from pydantic import BaseModel, ConfigDict, Field


class StorageConfig(BaseModel):
    """Location of runs, task corpora and weights."""

    model_config = ConfigDict(extra="forbid")

    root: str = Field(
        "runs",
        description="Local directory or `s3://bucket/prefix` holding every run. "
        "Relative paths are taken from the working directory.",
    )
    s3_endpoint_url: str | None = Field(
        None,
        description="S3 endpoint for non-AWS stores (MinIO, moto, Ceph). "
        "Unset: AWS_ENDPOINT_URL or AWS's default endpoint.",
    )
    s3_region: str | None = Field(None, description="S3 region; unset: AWS_REGION / AWS_DEFAULT_REGION.")
    retries: int = Field(
        5, ge=0, le=20, description="Attempts after the first for a failed store operation (S3 throttling, resets)."
    )
    retry_backoff_s: float = Field(
        0.2, gt=0, description="First retry delay in seconds; doubles each attempt (with jitter)."
    )
    connect_timeout_s: float = Field(5.0, gt=0, description="Seconds to wait for an S3 connection.")
