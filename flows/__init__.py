"""Prefect flows that compose tasks, run configuration, and the `tandem` CLI."""
