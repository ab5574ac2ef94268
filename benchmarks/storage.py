"""Trajectory lake vs JSONL: bytes on disk, write throughput and query latency.

Writes the same synthetic rollouts (default 200,000 episodes; prompt and completion
lengths lognormal, so a long tail of long episodes; Zipf-distributed token ids; a
loss mask of alternating model/observation segments; float logprobs; a rendered
conversation) twice: as our Parquet shards (storage.shards.write_shard, one shard per
step) and as one JSONL file per step, which is what most RL frameworks write.
Both writers start from the same Python rows, as a rollout worker holds them.

Then three typical queries run over each:
  q1 mean reward per step; q2 the 20 tasks failed most often;
  q3 completion tokens by finish reason,
through our DuckDB views (storage.query.connect, connection time included), through
DuckDB's read_json over the JSONL, and through plain Python json over the JSONL.
All three must give the same answers (`results_agree`). `query_speedup` is measured
against the faster of the two JSONL baselines: its total latency over the three
queries divided by ours; both ratios are reported too. `query_vs_raw_duckdb` is our
total latency (what `tandem query` does: connect, check every file's footer, typed
views) over DuckDB's own `read_parquet` on the same files from a fresh connection,
with its defaults (hive partitions detected); at most 1.5 is the target. The last
line printed is one JSON object.

    python -m benchmarks.storage [--episodes 200000] [--steps 100] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storage import shards
from storage.fs import open_store
from storage.query import connect

RUN = "bench"
VOCAB = 32_000
GROUP = 8  # samples per task in a step
FINISH = np.array(["submitted", "max_turns", "max_tokens", "timeout", "error"])
FINISH_P = [0.62, 0.2, 0.12, 0.05, 0.01]

QUERIES = {
    "q1_mean_reward_per_step": "SELECT step, avg(reward) AS mean_reward FROM {src} GROUP BY step ORDER BY step",
    "q2_tasks_failed_most": (
        "SELECT task_id, count(*) FILTER (WHERE NOT resolved) AS failures FROM {src} "
        "GROUP BY task_id ORDER BY failures DESC, task_id LIMIT 20"
    ),
    "q3_completion_tokens_by_finish_reason": (
        "SELECT finish_reason, sum(num_completion_tokens) AS tokens, count(*) AS episodes FROM {src} "
        "GROUP BY finish_reason ORDER BY finish_reason"
    ),
}


def make_words(rng: np.random.Generator) -> np.ndarray:
    """A synthetic vocabulary: one 'word' of 1-9 letters per token id (BPE tokens average ~4 characters)."""
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz_(){}:.=", dtype="S1")
    lengths = rng.integers(1, 10, VOCAB)
    return np.array([b"".join(rng.choice(letters, n)).decode() for n in lengths], dtype=object)


def ragged(rng: np.random.Generator, lengths: np.ndarray) -> np.ndarray:
    """Concatenated Zipf-distributed token ids for episodes of the given lengths."""
    return ((rng.zipf(1.3, int(lengths.sum())) - 1) % VOCAB).astype(np.int32)


def make_step(rng: np.random.Generator, words: np.ndarray, step: int, n: int, num_tasks: int) -> list[dict]:
    """`n` episodes of one step as Python rows, the form a rollout worker holds them in."""
    prompt_len = np.clip(rng.lognormal(np.log(128), 0.5, n), 16, 8192).astype(np.int64)
    completion_len = np.clip(rng.lognormal(np.log(80), 1.0, n), 4, 16384).astype(np.int64)
    prompt_ids = np.split(ragged(rng, prompt_len), np.cumsum(prompt_len)[:-1])
    completion_flat = ragged(rng, completion_len)
    starts = np.cumsum(completion_len)[:-1]
    position = np.arange(len(completion_flat)) - np.repeat(np.concatenate([[0], starts]), completion_len)
    mask_flat = (position // 64) % 2 == 0  # model turns and tool observations alternate
    logprob_flat = np.where(mask_flat, -rng.exponential(0.3, len(completion_flat)), 0.0)  # float64, as vLLM returns
    completion_ids = np.split(completion_flat, starts)
    masks, logprobs = np.split(mask_flat, starts), np.split(logprob_flat, starts)
    tasks = rng.integers(0, num_tasks, n // GROUP).repeat(GROUP)
    task_skill = (np.sin(np.arange(num_tasks)) + 1) / 2  # fixed per-task success rate
    resolved = rng.random(n) < task_skill[tasks] * 0.6
    finish = rng.choice(FINISH, n, p=FINISH_P)
    t0 = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=step)
    rows = []
    for i in range(n):
        c = completion_ids[i]
        reward = float(resolved[i])
        rows.append(
            {
                "run_id": RUN,
                "step": step,
                "policy_versions": [max(0, step - 1), step],
                "min_policy_version": max(0, step - 1),
                "task_id": f"toolz-mut-{tasks[i]:05d}",
                "group_id": f"{step}-{i // GROUP}",
                "sample_index": i % GROUP,
                "env_name": "micro",
                "prompt_ids": prompt_ids[i].tolist(),
                "completion_ids": c.tolist(),
                "loss_mask": masks[i].tolist(),
                "completion_logprobs": logprobs[i].tolist(),
                "num_prompt_tokens": len(prompt_ids[i]),
                "num_completion_tokens": len(c),
                "reward": reward,
                "advantage": reward - float(resolved[(i // GROUP) * GROUP : (i // GROUP + 1) * GROUP].mean()),
                "resolved": bool(resolved[i]),
                "f2p_passed": int(resolved[i]),
                "f2p_total": 1,
                "p2p_passed": 12 if resolved[i] else int(rng.integers(8, 13)),
                "p2p_total": 12,
                "test_report": json.dumps({f"tests/test_core.py::test_{k}": "PASSED" for k in range(4)}),
                "num_turns": int(rng.integers(1, 9)),
                "finish_reason": str(finish[i]),
                "generation_s": float(rng.gamma(2.0, 3.0)),
                "grading_s": float(rng.gamma(2.0, 0.4)),
                "infra_failure": bool(rng.random() < 0.002),
                "infra_message": None,
                "started_at": t0 + timedelta(seconds=i),
                "finished_at": t0 + timedelta(seconds=i + 7),
                "conversation": " ".join(words[prompt_ids[i]]) + "\n" + " ".join(words[c]),
            }
        )
    return rows


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(type(value).__name__)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row, default=_json_default))
            f.write("\n")


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def python_query(name: str, files: list[Path]) -> list[tuple]:
    """The three queries as a framework without a query engine runs them: parse every line."""
    groups: dict = defaultdict(lambda: [0.0, 0])
    for path in files:
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if name.startswith("q1"):
                    g = groups[row["step"]]
                    g[0] += row["reward"]
                    g[1] += 1
                elif name.startswith("q2"):
                    groups[row["task_id"]][0] += not row["resolved"]
                else:
                    g = groups[row["finish_reason"]]
                    g[0] += row["num_completion_tokens"]
                    g[1] += 1
    if name.startswith("q1"):
        return [(k, s / n) for k, (s, n) in sorted(groups.items())]
    if name.startswith("q2"):
        return sorted(((k, int(v[0])) for k, v in groups.items()), key=lambda kv: (-kv[1], kv[0]))[:20]
    return [(k, int(s), n) for k, (s, n) in sorted(groups.items())]


def same(a: list[tuple], b: list[tuple]) -> bool:
    """Equal results, with floats compared to 1e-9 (sum order differs between engines)."""
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        for x, y in zip(ra, rb):
            if isinstance(x, float) or isinstance(y, float):
                if abs(float(x) - float(y)) > 1e-9:
                    return False
            elif x != y:
                return False
    return True


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def query_vs_raw_duckdb(store, lake: Path, repeats: int = 3) -> tuple[float, bool]:
    """Best-of-`repeats` total time of the three queries the way `tandem query` runs them
    (connect: list files, check footers, create views; then the query) over the same
    queries through DuckDB's own read_parquet with its defaults, both warm and each
    from a fresh connection. Returns the ratio and whether the answers agree."""
    raw_src = f"read_parquet('{lake}/{RUN}/rollouts/**/*.parquet')"

    def ours() -> list:
        return [connect(store, RUN).sql(sql.format(src="rollouts")).fetchall() for sql in QUERIES.values()]

    def raw() -> list:
        return [duckdb.connect().sql(sql.format(src=raw_src)).fetchall() for sql in QUERIES.values()]

    a, b = ours(), raw()  # warm-up: both then read from the page cache
    best_ours = min(timed(ours)[1] for _ in range(repeats))
    best_raw = min(timed(raw)[1] for _ in range(repeats))
    print(
        f"tandem query {best_ours:.3f}s vs duckdb read_parquet {best_raw:.3f}s (three queries, best of {repeats})",
        file=sys.stderr,
        flush=True,
    )
    return best_ours / best_raw, all(same(x, y) for x, y in zip(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--dir", default=None, help="where to put the temporary files (default: system temp)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tandem-bench-storage-", dir=args.dir))
    try:
        report = run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report))


def run(args: argparse.Namespace, work: Path) -> dict:
    rng = np.random.default_rng(args.seed)
    words = make_words(rng)
    lake, jsonl_dir = work / "lake", work / "jsonl"
    jsonl_dir.mkdir(parents=True)
    store = open_store(str(lake))
    per_step = args.episodes // args.steps
    parquet_s = jsonl_s = generate_s = 0.0
    tokens = 0
    for step in range(args.steps):
        rows, gen_dt = timed(lambda: make_step(rng, words, step, per_step, args.tasks))
        generate_s += gen_dt
        tokens += sum(r["num_prompt_tokens"] + r["num_completion_tokens"] for r in rows)
        _, dt = timed(lambda: shards.write_shard(store, RUN, step, "w0", pa.Table.from_pylist(rows)))
        parquet_s += dt
        _, dt = timed(lambda: write_jsonl(jsonl_dir / f"rollouts_step_{step:05d}.jsonl", rows))
        jsonl_s += dt
        if step % 10 == 0:
            print(
                f"step {step}: generate {generate_s:.1f}s, parquet {parquet_s:.1f}s, jsonl {jsonl_s:.1f}s",
                file=sys.stderr,
                flush=True,
            )
    episodes = per_step * args.steps
    parquet_bytes, jsonl_bytes = dir_bytes(lake), dir_bytes(jsonl_dir)
    jsonl_files = sorted(jsonl_dir.glob("*.jsonl"))

    latency: dict[str, dict[str, float]] = {"ours": {}, "duckdb_json": {}, "python_json": {}}
    agree = True
    for name, sql in QUERIES.items():
        ours, latency["ours"][name] = timed(lambda: connect(store, RUN).sql(sql.format(src="rollouts")).fetchall())
        json_src = f"read_json('{jsonl_dir}/*.jsonl', format='newline_delimited')"
        con = duckdb.connect()
        dj, latency["duckdb_json"][name] = timed(lambda: con.sql(sql.format(src=json_src)).fetchall())
        py, latency["python_json"][name] = timed(lambda: python_query(name, jsonl_files))
        agree &= same(ours, dj) and same(ours, py)
        print(
            f"{name}: ours {latency['ours'][name]:.3f}s, duckdb json {latency['duckdb_json'][name]:.2f}s, "
            f"python json {latency['python_json'][name]:.2f}s",
            file=sys.stderr,
            flush=True,
        )

    vs_raw, raw_agree = query_vs_raw_duckdb(store, lake)
    agree &= raw_agree
    total = {k: sum(v.values()) for k, v in latency.items()}
    mb = 1 / 2**20
    return {
        "benchmark": "storage",
        "episodes": episodes,
        "steps": args.steps,
        "tokens": tokens,
        "parquet_bytes": parquet_bytes,
        "jsonl_bytes": jsonl_bytes,
        "size_ratio": round(jsonl_bytes / parquet_bytes, 2),
        "parquet_write_s": round(parquet_s, 2),
        "jsonl_write_s": round(jsonl_s, 2),
        "parquet_write_episodes_per_s": round(episodes / parquet_s),
        "jsonl_write_episodes_per_s": round(episodes / jsonl_s),
        "parquet_write_mb_per_s_of_jsonl_equivalent": round(jsonl_bytes * mb / parquet_s, 1),
        "jsonl_write_mb_per_s": round(jsonl_bytes * mb / jsonl_s, 1),
        "query_latency_s": {k: {q: round(t, 4) for q, t in v.items()} for k, v in latency.items()},
        "query_speedup": round(min(total["duckdb_json"], total["python_json"]) / total["ours"], 1),
        "query_speedup_baseline": "the faster JSONL baseline: "
        + ("duckdb read_json" if total["duckdb_json"] <= total["python_json"] else "python json"),
        "query_speedup_vs_duckdb_json": round(total["duckdb_json"] / total["ours"], 1),
        "query_speedup_vs_python_json": round(total["python_json"] / total["ours"], 1),
        "min_per_query_speedup_vs_duckdb_json": round(
            min(latency["duckdb_json"][q] / latency["ours"][q] for q in QUERIES), 1
        ),
        "query_vs_raw_duckdb": round(vs_raw, 2),
        "results_agree": bool(agree),
    }


if __name__ == "__main__":
    main()
