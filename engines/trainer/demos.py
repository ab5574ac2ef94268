"""Demonstrations for `tandem sft`: the user's conversations from JSONL or Parquet.

A record is a conversation, written as {"messages": [{"role": ..., "content": ...}, ...]}
(the chat format most datasets use), {"conversation": [...]}, or a bare list of
messages. In Parquet, the column `messages` (or `conversation`) holds the list.
Roles are checked when the conversation is tokenised (sft.py), with its index.
"""

from __future__ import annotations

import json
from pathlib import Path

_KEYS = ("messages", "conversation")


def load_conversations(path: str | Path) -> list[list[dict[str, str]]]:
    """Every conversation in `path` (.jsonl / .json lines, or .parquet); errors name the record."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file; give a JSONL or Parquet file of conversations")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(p)
        column = next((k for k in _KEYS if k in table.column_names), None)
        if column is None:
            raise ValueError(f"{p}: no column named {' or '.join(_KEYS)} (columns: {table.column_names})")
        return [_messages(row, f"{p} row {i}") for i, row in enumerate(table.column(column).to_pylist())]
    conversations = []
    with open(p) as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{p}:{lineno}: not JSON ({exc})") from None
                conversations.append(_messages(record, f"{p}:{lineno}"))
    return conversations


def _messages(record: object, where: str) -> list[dict[str, str]]:
    if isinstance(record, dict):
        record = next((record[k] for k in _KEYS if k in record), None)
    if not isinstance(record, list) or not all(isinstance(m, dict) and "role" in m for m in record):
        raise ValueError(f"{where}: expected a list of {{role, content}} messages (or a record with 'messages')")
    return [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in record]
