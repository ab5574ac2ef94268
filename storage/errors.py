"""Errors raised by the storage layer. Each message names the file, run or step
involved and says what to do next."""


class StorageError(Exception):
    """Base class for storage failures."""


class NotFoundError(StorageError, LookupError):
    """A run, step or version that does not exist; the message lists what does."""


class CorruptFileError(StorageError):
    """A Parquet file that cannot be read (truncated, not Parquet, bad footer)."""


class SchemaVersionError(StorageError):
    """A file written by a newer schema version than this code understands."""


class StorageUnavailableError(StorageError):
    """The store kept failing (unreachable, throttling) after bounded retries."""
