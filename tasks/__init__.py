"""Thin Prefect tasks over engines and storage: coarse units, retries on I/O only."""
