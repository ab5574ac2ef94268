"""A shard writer run as its own process by the tests, so they can kill it mid-write
or run several at once. Not a test module.

    python -m tests.storage.writer_process loop  ROOT RUN STEP SHARD ROWS
        rewrite one large shard forever, alternating ROWS and ROWS+1 rows; prints
        "writing <i>" before and "wrote <i>" after each write
    python -m tests.storage.writer_process fresh ROOT RUN STEP ROWS
        the same, but write <i> goes to a new shard named s<i>
    python -m tests.storage.writer_process steps ROOT RUN SHARD STEPS ROWS FIRST_INDEX
        write SHARD for steps 0..STEPS-1, ROWS episodes each
"""

from __future__ import annotations

import os
import sys

import pyarrow as pa

from storage import shards
from storage.fs import open_store
from tests.storage.conftest import make_episodes


def large_table(run: str, step: int, rows: int) -> pa.Table:
    """`rows` episodes carrying 20 kB of incompressible text each, so a write takes a while."""
    base = make_episodes(run, step, 1)
    table = pa.concat_tables([base] * rows)
    text = pa.array([os.urandom(10_000).hex() for _ in range(rows)])
    return table.set_column(table.schema.get_field_index("conversation"), "conversation", text)


def main(argv: list[str]) -> None:
    mode, root, run = argv[:3]
    store = open_store(root)
    if mode in ("loop", "fresh"):
        step, rows = int(argv[3]), int(argv[-1])
        tables = [large_table(run, step, rows), large_table(run, step, rows + 1)]
        i = 0
        while True:
            print(f"writing {i}", flush=True)
            shard = argv[4] if mode == "loop" else f"s{i}"
            shards.write_shard(store, run, step, shard, tables[i % 2])
            print(f"wrote {i}", flush=True)
            i += 1
    elif mode == "steps":
        shard, steps, rows, first = argv[3], int(argv[4]), int(argv[5]), int(argv[6])
        for step in range(steps):
            shards.write_shard(store, run, step, shard, make_episodes(run, step, rows, seed=step, first_index=first))
        print("done", flush=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}: use loop, fresh or steps")


if __name__ == "__main__":
    main(sys.argv[1:])
