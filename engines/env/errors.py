"""Errors the environment raises for bad set-up (never for bad model output)."""

from __future__ import annotations


class EnvError(Exception):
    """Base class of environment errors."""


class SandboxUnavailableError(EnvError):
    """bubblewrap is missing or cannot start here."""


class TaskError(EnvError, ValueError):
    """A task is malformed (missing fields, snapshot absent, broken test patch)."""


class BuildError(EnvError):
    """A project cannot be turned into tasks (no tests, tests fail, bad sdist)."""
