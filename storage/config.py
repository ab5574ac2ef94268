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
        5,
        ge=0,
        le=20,
        description="Retries after the first attempt of each S3 request (refused connections, timeouts, "
        "5xx, throttling), with botocore's exponential backoff and jitter (at most 20 s a wait). "
        "0 fails at the first error.",
    )
    outage_limit_s: float = Field(
        300.0,
        ge=0,
        description="How long an S3 store may stay unreachable (an outage: every request failing after "
        "`retries`) before the run fails. Until then each failing operation is tried again with backoff "
        "(1 s doubling to 10 s), and the terminal says so; after it, StorageUnavailableError ends the run, "
        "and the same command resumes it. 0: fail once the retries are spent.",
    )
    connect_timeout_s: float = Field(5.0, gt=0, description="Seconds to wait for an S3 connection.")
    read_timeout_s: float = Field(60.0, gt=0, description="Seconds to wait for S3 to answer a request.")
